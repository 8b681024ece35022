// Package dist_test checks the release artefacts as a user receives them:
// dist/install.yaml, dist/install-selfsigned.yaml and dist/chart rendered by
// helm template (docs/operations.md). `make test` runs it with HELM set to the
// pinned helm (bin/helm-<version>, built by `make lint-chart`).
package dist_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/retrydev/retry-operator/internal/manifests"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// releaseNamespace is the namespace dist/install*.yaml install into; the chart
// is rendered into the same one so the two compare.
const releaseNamespace = "retry-operator-system"

// helmBinary is the helm the tests render the chart with: $HELM, else the
// one `make lint-chart` builds into bin/.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		if _, err := os.Stat(h); err != nil {
			t.Fatalf("HELM=%s: %v", h, err)
		}
		return h
	}
	found, _ := filepath.Glob("../bin/helm-*")
	if len(found) == 0 {
		t.Skip("no helm: run `make lint-chart` (it builds bin/helm-<version>) or set HELM")
	}
	return found[len(found)-1]
}

// helmTemplate renders dist/chart with the CRDs and the given helm flags
// (--set k=v, -f file); it fails the test when helm fails.
func helmTemplate(t *testing.T, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelmTemplate(t, flags...)
	if err != nil {
		t.Fatalf("helm template %v: %v", flags, err)
	}
	objs, err := manifests.Parse(out)
	if err != nil {
		t.Fatalf("helm template %v: %v", flags, err)
	}
	return objs
}

// runHelmTemplate is helm template's output, or an error carrying its
// standard error.
func runHelmTemplate(t *testing.T, flags ...string) ([]byte, error) {
	t.Helper()
	args := append([]string{"template", "retry-operator", "chart", "--namespace", releaseNamespace, "--include-crds",
		"--kube-version", testenv.KubeVersion}, flags...)
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &helmError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// readManifests parses a file of rendered objects (a path relative to dist/
// or the repository root as ../...).
func readManifests(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}
