package v1alpha1

import (
	"bytes"
	"os"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestGeneratedManifestsUseTheWellKnownNames holds what the markers and
// kustomize generate (names no Go constant can reach) to the constants every
// binary uses: the webhooks and their configurations, the namespaces the pod
// webhooks never see, and the operator's namespace in the release artefacts.
func TestGeneratedManifestsUseTheWellKnownNames(t *testing.T) {
	type object struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta                         `json:"metadata"`
		Webhooks        []admissionregistrationv1.MutatingWebhook `json:"webhooks"`
	}
	read := func(path string) []object {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []object
		for _, doc := range bytes.Split(b, []byte("\n---")) {
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
		return out
	}
	for _, path := range []string{"../../dist/install.yaml", "../../dist/install-selfsigned.yaml"} {
		names := map[string][]string{}
		for _, o := range read(path) {
			names[o.Kind] = append(names[o.Kind], o.Metadata.Name)
			if o.Kind != "MutatingWebhookConfiguration" {
				continue
			}
			for _, w := range o.Webhooks {
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
	for _, name := range []string{InjectWebhookName, PodOptInInjectWebhookName, ValidateWebhookName} {
		if !bytes.Contains(manifests, []byte("name: "+name+"\n")) {
			t.Errorf("config/webhook/manifests.yaml has no webhook %q", name)
		}
	}
}
