// Package config_test renders the kustomize overlays of config/ with every
// kustomize at hand: the pinned one, the one kubectl 1.32 embeds (v5.5, the
// oldest the overlays support; `make test` builds both and passes them in
// KUSTOMIZE_BINARIES), the kubectl on PATH and the source-built kubectl
// (docs/operations.md, "With kubectl").
package config_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/retrydev/retry-operator/internal/manifests"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// overlays are the kustomizations users and scripts apply.
var overlays = []string{"default", "selfsigned", "local"}

// renderer is one kustomize: its name and the command that renders a directory.
type renderer struct {
	name string
	cmd  func(dir string) *exec.Cmd
}

func renderers(t *testing.T) []renderer {
	var rs []renderer
	for _, bin := range strings.Fields(os.Getenv("KUSTOMIZE_BINARIES")) {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("KUSTOMIZE_BINARIES names %s: %v", bin, err)
		}
		rs = append(rs, renderer{name: filepath.Base(bin), cmd: func(dir string) *exec.Cmd { return exec.Command(bin, "build", dir) }})
	}
	kubectls := []string{filepath.Join(testenv.ModuleRoot(), "bin", "k8s", testenv.KubeVersion, "kubectl")}
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		kubectls = append(kubectls, filepath.Join(dir, "kubectl"))
	}
	if path, err := exec.LookPath("kubectl"); err == nil {
		kubectls = append(kubectls, path)
	}
	seen := map[string]bool{}
	for _, k := range kubectls {
		if _, err := os.Stat(k); err != nil || seen[k] {
			continue
		}
		seen[k] = true
		out, err := exec.Command(k, "version", "--client").Output()
		if err != nil {
			continue
		}
		version := strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", ")
		rs = append(rs, renderer{name: k + " (" + version + ")", cmd: func(dir string) *exec.Cmd { return exec.Command(k, "kustomize", dir) }})
	}
	if len(rs) == 0 {
		t.Skip("no kustomize: set KUSTOMIZE_BINARIES (make test does) or put a kubectl on PATH")
	}
	return rs
}

// TestOverlaysRenderWithEveryKustomize: every overlay renders with every
// kustomize at hand, and all render the same objects; the self-signed ones
// hold no cert-manager object.
func TestOverlaysRenderWithEveryKustomize(t *testing.T) {
	rs := renderers(t)
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			var first []manifests.Key
			for i, r := range rs {
				cmd := r.cmd(overlay)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Errorf("%s: %v\n%.2000s", r.name, err, stderr.String())
					continue
				}
				objs, err := manifests.Parse(out)
				if err != nil {
					t.Errorf("%s: %v", r.name, err)
					continue
				}
				keys := manifests.Keys(objs)
				slices.SortFunc(keys, func(a, b manifests.Key) int { return strings.Compare(a.String(), b.String()) })
				if overlay != "default" && slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool {
					return strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/")
				}) {
					t.Errorf("%s: config/%s renders a cert-manager object", r.name, overlay)
				}
				if i == 0 {
					first = keys
				} else if !slices.Equal(keys, first) {
					t.Errorf("%s renders %v, %s renders %v", r.name, keys, rs[0].name, first)
				}
			}
		})
	}
}
