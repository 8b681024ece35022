package dist_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/retrydev/retry-operator/internal/manifests"
)

// onlyInManifests are the objects of dist/install*.yaml the chart does not
// render, each with the reason. Anything else one rendering has and the other
// lacks fails TestChartRendersTheManifestsObjects.
var onlyInManifests = map[manifests.Key]string{
	{Kind: "Namespace", Name: releaseNamespace}: "Helm installs into the release namespace and does not own it (helm install --create-namespace)",
}

// onlyInChart are the objects the chart renders and dist/install*.yaml do
// not, each with the reason.
var onlyInChart = map[manifests.Key]string{
	{Kind: "ServiceAccount", Namespace: releaseNamespace, Name: "retry-operator-startupapicheck"}: startupHook,
	{Kind: "Role", Namespace: releaseNamespace, Name: "retry-operator-startupapicheck"}:           startupHook,
	{Kind: "RoleBinding", Namespace: releaseNamespace, Name: "retry-operator-startupapicheck"}:    startupHook,
	{Kind: "Job", Namespace: releaseNamespace, Name: "retry-operator-startupapicheck"}:            startupHook,
}

const startupHook = "a Helm hook: helm install --wait returns once a RetryPolicy is admitted; kubectl apply of the manifests has no hooks (docs/operations.md#install)"

// monitorsOn are the helm flags that enable both Prometheus monitors.
var monitorsOn = []string{"--set", "prometheus.serviceMonitor.enabled=true", "--set", "prometheus.podMonitor.enabled=true"}

// TestChartRendersTheManifestsObjects: dist/chart and dist/install*.yaml are
// two packagings of one install. For each certificate mode (and with the
// Prometheus monitors of config/prometheus) the chart renders exactly the
// objects of the matching manifests, by kind, namespace and name, and every
// Role and ClusterRole they share has the same rules and labels of its own.
func TestChartRendersTheManifestsObjects(t *testing.T) {
	monitors := append(readManifests(t, "../config/prometheus/monitor.yaml"), readManifests(t, "../config/prometheus/sidecar_podmonitor.yaml")...)
	tests := map[string]struct {
		helmFlags []string
		manifests []*unstructured.Unstructured
	}{
		"the default values render dist/install.yaml (cert-manager)": {
			manifests: readManifests(t, "install.yaml"),
		},
		"certificates.mode=self-signed renders dist/install-selfsigned.yaml": {
			helmFlags: []string{"--set", "certificates.mode=self-signed"},
			manifests: readManifests(t, "install-selfsigned.yaml"),
		},
		"the Prometheus monitors add config/prometheus's ServiceMonitor and PodMonitor": {
			helmFlags: monitorsOn,
			manifests: append(readManifests(t, "install.yaml"), monitors...),
		},
		"self-signed with the Prometheus monitors": {
			helmFlags: append([]string{"--set", "certificates.mode=self-signed"}, monitorsOn...),
			manifests: append(readManifests(t, "install-selfsigned.yaml"), monitors...),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			chart := helmTemplate(t, tc.helmFlags...)
			chartKeys, manifestKeys := keySet(chart), keySet(tc.manifests)
			for k := range manifestKeys {
				if _, ok := chartKeys[k]; !ok && onlyInManifests[k] == "" {
					t.Errorf("%s is in the manifests, not in the chart", k)
				}
			}
			for k := range chartKeys {
				if _, ok := manifestKeys[k]; !ok && onlyInChart[k] == "" {
					t.Errorf("%s is in the chart, not in the manifests", k)
				}
			}
			for k, m := range manifestKeys {
				c, ok := chartKeys[k]
				if !ok || (k.Kind != "Role" && k.Kind != "ClusterRole") {
					continue
				}
				if !reflect.DeepEqual(c.Object["rules"], m.Object["rules"]) {
					t.Errorf("%s: the chart's rules differ from the manifests'", k)
				}
				if cl, ml := ownLabels(c), ownLabels(m); !reflect.DeepEqual(cl, ml) {
					t.Errorf("%s: the chart's own labels are %v, the manifests' %v", k, cl, ml)
				}
			}
		})
	}
}

// TestEveryIntentionalDifferenceIsInTheManifests keeps onlyInManifests short:
// an entry that no longer names an object of dist/ must go.
func TestEveryIntentionalDifferenceIsInTheManifests(t *testing.T) {
	all := keySet(append(readManifests(t, "install.yaml"), readManifests(t, "install-selfsigned.yaml")...))
	for k := range onlyInManifests {
		if _, ok := all[k]; !ok {
			t.Errorf("onlyInManifests names %s, which dist/install*.yaml no longer has", k)
		}
	}
}

func keySet(objs []*unstructured.Unstructured) map[manifests.Key]*unstructured.Unstructured {
	set := map[manifests.Key]*unstructured.Unstructured{}
	for _, o := range objs {
		set[manifests.KeyOf(o)] = o
	}
	return set
}

// ownLabels are o's labels that are neither the chart's nor kustomize's
// bookkeeping (app.kubernetes.io/*, helm.sh/chart): role aggregation.
func ownLabels(o *unstructured.Unstructured) []string {
	var own []string
	for k, v := range o.GetLabels() {
		if !slices.Contains([]string{"helm.sh/chart", "control-plane"}, k) && !strings.HasPrefix(k, "app.kubernetes.io/") {
			own = append(own, k+"="+v)
		}
	}
	slices.Sort(own)
	return own
}
