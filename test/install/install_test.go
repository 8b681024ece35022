// Package install checks the release artefacts in dist/ against a real
// kube-apiserver: every object of dist/install.yaml and
// dist/install-selfsigned.yaml must be accepted (server-side dry run, after
// the CRD itself), so a schema or RBAC mistake fails `make test`, not an
// install. cert-manager's kinds are skipped: envtest has no cert-manager.
package install

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

func TestDistManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	cfg := testenv.Start(t, &envtest.Environment{})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"install.yaml", "install-selfsigned.yaml"} {
		t.Run(file, func(t *testing.T) {
			objs := decode(t, filepath.Join(testenv.ModuleRoot(), "dist", file))
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
				if o.GetAPIVersion() == "cert-manager.io/v1" {
					continue
				}
				var err error
				switch o.GetKind() {
				case "Namespace":
					// Created for real: the namespaced objects are checked inside it.
					if err = c.Create(context.Background(), o); apierrors.IsAlreadyExists(err) {
						err = nil
					}
				case "CustomResourceDefinition":
					// Already installed by testenv from config/crd: it must be
					// the same object, so an update is a no-op the server accepts.
					cur := &unstructured.Unstructured{}
					cur.SetGroupVersionKind(o.GroupVersionKind())
					if err = c.Get(context.Background(), client.ObjectKeyFromObject(o), cur); err == nil {
						o.SetResourceVersion(cur.GetResourceVersion())
						err = c.Update(context.Background(), o, client.DryRunAll)
					}
				default:
					err = c.Create(context.Background(), o, client.DryRunAll)
				}
				if err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			for _, k := range []string{"CustomResourceDefinition", "Deployment", "PodDisruptionBudget", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole"} {
				if kinds[k] == 0 {
					t.Errorf("%s has no %s", file, k)
				}
			}
			t.Logf("%s: %d objects %v", file, len(objs), kinds)
		})
	}
}

func decode(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make build-installer)", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}
