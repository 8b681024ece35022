package v1alpha1

import (
	"bytes"
	"os"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/retrydev/retry-operator/internal/manifests"
)

// TestGeneratedManifestsUseTheWellKnownNames holds what the markers and
// kustomize generate (names no Go constant can reach) to the constants every
// binary uses: the webhooks and their configurations, the namespaces the pod
// webhooks never see, and the operator's namespace in the release artefacts.
func TestGeneratedManifestsUseTheWellKnownNames(t *testing.T) {
	read := func(path string) []*unstructured.Unstructured {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifests.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return objs
	}
	for _, path := range []string{"../../dist/install.yaml", "../../dist/install-selfsigned.yaml"} {
		names := map[string][]string{}
		for _, o := range read(path) {
			names[o.GetKind()] = append(names[o.GetKind()], o.GetName())
			if o.GetKind() != "MutatingWebhookConfiguration" {
				continue
			}
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &mwc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, w := range mwc.Webhooks {
				if w.NamespaceSelector == nil {
					t.Errorf("%s: webhook %s has no namespaceSelector", path, w.Name)
					continue
				}
				for _, e := range w.NamespaceSelector.MatchExpressions {
					if e.Key == corev1.LabelMetadataName && !slices.Equal(e.Values, ExcludedNamespaces(OperatorNamespace)) {
						t.Errorf("%s: webhook %s excludes %v, want ExcludedNamespaces %v", path, w.Name, e.Values, ExcludedNamespaces(OperatorNamespace))
					}
				}
			}
		}
		for kind, want := range map[string][]string{
			"Namespace":                      {OperatorNamespace},
			"MutatingWebhookConfiguration":   {MutatingWebhookConfigurationName},
			"ValidatingWebhookConfiguration": {ValidatingWebhookConfigurationName},
		} {
			if !slices.Equal(names[kind], want) {
				t.Errorf("%s: %s %v, want %v", path, kind, names[kind], want)
			}
		}
	}
	manifests, err := os.ReadFile("../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{InjectWebhookName, PodOptInInjectWebhookName, ValidateWebhookName, ValidateQuotaWebhookName} {
		if !bytes.Contains(manifests, []byte("name: "+name+"\n")) {
			t.Errorf("config/webhook/manifests.yaml has no webhook %q", name)
		}
	}
}
