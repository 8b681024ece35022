package dist_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/internal/manifests"
)

// The objects the values reach.
var (
	deployment     = manifests.Key{Kind: "Deployment", Namespace: releaseNamespace, Name: "retry-operator-controller-manager"}
	serviceAccount = manifests.Key{Kind: "ServiceAccount", Namespace: releaseNamespace, Name: "retry-operator-controller-manager"}
	pdb            = manifests.Key{Kind: "PodDisruptionBudget", Namespace: releaseNamespace, Name: "retry-operator-controller-manager"}
	mutating       = manifests.Key{Kind: "MutatingWebhookConfiguration", Name: "retry-operator-mutating-webhook-configuration"}
	validating     = manifests.Key{Kind: "ValidatingWebhookConfiguration", Name: "retry-operator-validating-webhook-configuration"}
	managerBinding = manifests.Key{Kind: "ClusterRoleBinding", Name: "retry-operator-manager-rolebinding"}
	podMonitor     = manifests.Key{Kind: "PodMonitor", Namespace: releaseNamespace, Name: "retry-operator-sidecars"}
	serviceMonitor = manifests.Key{Kind: "ServiceMonitor", Namespace: releaseNamespace, Name: "retry-operator-controller-manager-metrics-monitor"}
	startupJob     = manifests.Key{Kind: "Job", Namespace: releaseNamespace, Name: "retry-operator-startupapicheck"}
)

const (
	podSpec = "spec.template.spec"
	args    = podSpec + ".containers.0.args"
)

// expect is one thing a rendering must show: the value at path (dotted, list
// indices as numbers) of object obj equals want (YAML), or, with contains,
// is a list holding want; with absent, the field (or, with no path, the
// object) does not exist.
type expect struct {
	obj      manifests.Key
	path     string
	want     string
	contains bool
	absent   bool
}

// valueReachesCase is one case of TestEveryValueReachesItsObject.
type valueReachesCase struct {
	values string
	expect []expect
}

// digest is an image digest of the right form.
const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// valueReachesCases are the cases of TestEveryValueReachesItsObject.
var valueReachesCases = map[string]valueReachesCase{
	"the defaults: images at the chart's appVersion, 2 replicas, minAvailable 1, the pod webhook ignoring failures within 5s": {
		expect: []expect{
			{obj: deployment, path: podSpec + ".containers.0.image", want: "retry.dev/manager:dev"},
			{obj: deployment, path: args, want: "--sidecar-image=retry.dev/retry-sidecar:dev", contains: true},
			{obj: deployment, path: "spec.replicas", want: "2"},
			{obj: deployment, path: args, want: "--leader-elect", contains: true},
			{obj: deployment, path: args, want: "--zap-log-level=info", contains: true},
			{obj: deployment, path: podSpec + ".imagePullSecrets", absent: true},
			{obj: pdb, path: "spec.minAvailable", want: "1"},
			{obj: mutating, path: "webhooks.0.failurePolicy", want: "Ignore"},
			{obj: mutating, path: "webhooks.1.timeoutSeconds", want: "5"},
			{obj: serviceAccount, path: "metadata.name", want: "retry-operator-controller-manager"},
			{obj: podMonitor, absent: true},
			{obj: serviceMonitor, absent: true},
		},
	},
	"tracing.otlpEndpoint and samplingRatio reach the manager's tracing flags": {
		values: "tracing: {otlpEndpoint: 'http://otel-collector.observability.svc:4318', samplingRatio: 0.1}",
		expect: []expect{
			{obj: deployment, path: args, want: "--tracing-otlp-endpoint=http://otel-collector.observability.svc:4318", contains: true},
			{obj: deployment, path: args, want: "--tracing-sampling-ratio=0.1", contains: true},
		},
	},
	"image.manager.repository, tag and pullPolicy set the manager container": {
		values: "image: {manager: {repository: registry.example/retry/manager, tag: v0.1.0, pullPolicy: Always}}",
		expect: []expect{
			{obj: deployment, path: podSpec + ".containers.0.image", want: "registry.example/retry/manager:v0.1.0"},
			{obj: deployment, path: podSpec + ".containers.0.imagePullPolicy", want: "Always"},
		},
	},
	"image.manager.digest wins over the tag": {
		values: "image: {manager: {repository: registry.example/retry/manager, tag: v0.1.0, digest: " + digest + "}}",
		expect: []expect{{obj: deployment, path: podSpec + ".containers.0.image", want: "registry.example/retry/manager@" + digest}},
	},
	"image.sidecar.repository, tag and pullPolicy reach the manager's injection flags": {
		values: "image: {sidecar: {repository: registry.example/retry/retry-sidecar, tag: v0.1.0, pullPolicy: IfNotPresent}}",
		expect: []expect{
			{obj: deployment, path: args, want: "--sidecar-image=registry.example/retry/retry-sidecar:v0.1.0", contains: true},
			{obj: deployment, path: args, want: "--sidecar-image-pull-policy=IfNotPresent", contains: true},
		},
	},
	"image.sidecar.digest wins over the tag": {
		values: "image: {sidecar: {repository: registry.example/retry/retry-sidecar, tag: v0.1.0, digest: " + digest + "}}",
		expect: []expect{{obj: deployment, path: args, want: "--sidecar-image=registry.example/retry/retry-sidecar@" + digest, contains: true}},
	},
	"imagePullSecrets reach the manager pods and, by flag, every injected pod": {
		values: "imagePullSecrets: [{name: regcred}, {name: mirror}]",
		expect: []expect{
			{obj: deployment, path: podSpec + ".imagePullSecrets", want: "[{name: regcred}, {name: mirror}]"},
			{obj: deployment, path: args, want: "--sidecar-image-pull-secrets=regcred,mirror", contains: true},
		},
	},
	"serviceAccount.name and annotations name the account, the pods and the bindings": {
		values: "serviceAccount: {name: retry-manager, annotations: {iam.example/role: retry}}",
		expect: []expect{
			{obj: manifests.Key{Kind: "ServiceAccount", Namespace: releaseNamespace, Name: "retry-manager"}, path: "metadata.annotations", want: "{iam.example/role: retry}"},
			{obj: serviceAccount, absent: true},
			{obj: deployment, path: podSpec + ".serviceAccountName", want: "retry-manager"},
			{obj: managerBinding, path: "subjects.0.name", want: "retry-manager"},
		},
	},
	"serviceAccount.create false leaves the account to you": {
		values: "serviceAccount: {create: false, name: existing}",
		expect: []expect{
			{obj: manifests.Key{Kind: "ServiceAccount", Namespace: releaseNamespace, Name: "existing"}, absent: true},
			{obj: serviceAccount, absent: true},
			{obj: deployment, path: podSpec + ".serviceAccountName", want: "existing"},
		},
	},
	"podAnnotations and podLabels reach the pod template": {
		values: "podAnnotations: {team.example/owner: platform}\npodLabels: {team: platform}",
		expect: []expect{
			{obj: deployment, path: "spec.template.metadata.annotations", want: "{kubectl.kubernetes.io/default-container: manager, team.example/owner: platform}"},
			{obj: deployment, path: "spec.template.metadata.labels.team", want: "platform"},
			{obj: deployment, path: "spec.template.metadata.labels.control-plane", want: "controller-manager"},
		},
	},
	"priorityClassName, nodeSelector, tolerations, affinity and topologySpreadConstraints schedule the pods": {
		values: `priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [platform]}]}]}}}
topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {control-plane: controller-manager}}}]`,
		expect: []expect{
			{obj: deployment, path: podSpec + ".priorityClassName", want: "system-cluster-critical"},
			{obj: deployment, path: podSpec + ".nodeSelector", want: "{kubernetes.io/os: linux}"},
			{obj: deployment, path: podSpec + ".tolerations", want: "[{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]"},
			{obj: deployment, path: podSpec + ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0.matchExpressions.0.key", want: "pool"},
			{obj: deployment, path: podSpec + ".affinity.podAntiAffinity", absent: true},
			{obj: deployment, path: podSpec + ".topologySpreadConstraints.0.topologyKey", want: "topology.kubernetes.io/zone"},
		},
	},
	"resources and replicaCount size the manager (null drops a default)": {
		values: "replicaCount: 3\nresources: {requests: {cpu: 100m, memory: 128Mi}, limits: {cpu: null, memory: 256Mi}}",
		expect: []expect{
			{obj: deployment, path: "spec.replicas", want: "3"},
			{obj: deployment, path: podSpec + ".containers.0.resources", want: "{requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}"},
		},
	},
	"podDisruptionBudget.minAvailable": {
		values: "podDisruptionBudget: {minAvailable: 2}",
		expect: []expect{{obj: pdb, path: "spec.minAvailable", want: "2"}, {obj: pdb, path: "spec.maxUnavailable", absent: true}},
	},
	"podDisruptionBudget.maxUnavailable replaces minAvailable": {
		values: "podDisruptionBudget: {maxUnavailable: 50%}",
		expect: []expect{{obj: pdb, path: "spec.maxUnavailable", want: "50%"}, {obj: pdb, path: "spec.minAvailable", absent: true}},
	},
	"webhook.timeoutSeconds and failurePolicy set both pod webhook entries, not the policy webhook": {
		values: "webhook: {timeoutSeconds: 10, failurePolicy: Fail}",
		expect: []expect{
			{obj: mutating, path: "webhooks.0.timeoutSeconds", want: "10"},
			{obj: mutating, path: "webhooks.1.timeoutSeconds", want: "10"},
			{obj: mutating, path: "webhooks.0.failurePolicy", want: "Fail"},
			{obj: mutating, path: "webhooks.1.failurePolicy", want: "Fail"},
			{obj: validating, path: "webhooks.0.timeoutSeconds", want: "5"},
		},
	},
	"prometheus.podMonitor enabled with an interval and labels": {
		values: "prometheus: {podMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus}}}",
		expect: []expect{
			{obj: podMonitor, path: "spec.podMetricsEndpoints.0.interval", want: "15s"},
			{obj: podMonitor, path: "metadata.labels.release", want: "kube-prometheus"},
			{obj: serviceMonitor, absent: true},
		},
	},
	"prometheus.serviceMonitor enabled with an interval and labels": {
		values: "prometheus: {serviceMonitor: {enabled: true, interval: 1m, labels: {release: kube-prometheus}}}",
		expect: []expect{
			{obj: serviceMonitor, path: "spec.endpoints.0.interval", want: "1m"},
			{obj: serviceMonitor, path: "metadata.labels.release", want: "kube-prometheus"},
			{obj: podMonitor, absent: true},
		},
	},
	"the startupapicheck hook runs the manager image after install and upgrade, for startupapicheck.timeoutSeconds": {
		values: "startupapicheck: {timeoutSeconds: 300}\nimage: {manager: {repository: registry.example/retry/manager, tag: v0.1.0}}",
		expect: []expect{
			{obj: startupJob, path: "metadata.annotations", want: "{helm.sh/hook: 'post-install,post-upgrade', helm.sh/hook-weight: '1', helm.sh/hook-delete-policy: 'before-hook-creation,hook-succeeded'}"},
			{obj: startupJob, path: podSpec + ".containers.0.image", want: "registry.example/retry/manager:v0.1.0"},
			{obj: startupJob, path: podSpec + ".containers.0.args", want: "--timeout=300s", contains: true},
			{obj: startupJob, path: "spec.activeDeadlineSeconds", want: "330"},
		},
	},
	"startupapicheck.enabled false renders no hook": {
		values: "startupapicheck: {enabled: false}",
		expect: []expect{{obj: startupJob, absent: true}},
	},
	"extraArgs, extraEnv and logLevel reach the manager container": {
		values: "logLevel: debug\nextraArgs: [--sidecar-token-audience=retry]\nextraEnv: [{name: GOMEMLIMIT, value: 100MiB}]",
		expect: []expect{
			{obj: deployment, path: args, want: "--zap-log-level=debug", contains: true},
			{obj: deployment, path: args, want: "--sidecar-token-audience=retry", contains: true},
			{obj: deployment, path: podSpec + ".containers.0.env", want: "{name: GOMEMLIMIT, value: 100MiB}", contains: true},
		},
	},
	"leaderElection, maxConcurrentReconciles and the sidecar defaults reach the manager's flags": {
		values: "leaderElection: false\nmaxConcurrentReconciles: 8\nsidecar: {noProxy: 'localhost,.internal', resources: {cpuRequest: 20m, memoryRequest: 16Mi, memoryLimit: 64Mi}}",
		expect: []expect{
			{obj: deployment, path: args, want: "--leader-elect", contains: true, absent: true},
			{obj: deployment, path: args, want: "--max-concurrent-reconciles=8", contains: true},
			{obj: deployment, path: args, want: "--sidecar-no-proxy=localhost,.internal", contains: true},
			{obj: deployment, path: args, want: "--sidecar-cpu-request=20m", contains: true},
			{obj: deployment, path: args, want: "--sidecar-memory-request=16Mi", contains: true},
			{obj: deployment, path: args, want: "--sidecar-memory-limit=64Mi", contains: true},
		},
	},
}

// TestEveryValueReachesItsObject renders the chart with one value (or one
// group of values) set and finds it in the object it configures.
func TestEveryValueReachesItsObject(t *testing.T) {
	tests := valueReachesCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs := helmTemplate(t, valuesFile(t, tc.values)...)
			for _, e := range tc.expect {
				e.check(t, objs)
			}
		})
	}
}

// TestWrongValuesFailNamingTheKey: helm refuses an unknown key, a wrong type
// or a value outside its set, and says which key.
func TestWrongValuesFailNamingTheKey(t *testing.T) {
	tests := map[string]struct {
		values string
		want   []string
	}{
		"an unknown top-level key (the old replicas)": {
			values: "replicas: 3", want: []string{"at '': additional properties 'replicas' not allowed"}},
		"an unknown nested key": {
			values: "image: {manager: {tagg: v1}}", want: []string{"at '/image/manager': additional properties 'tagg' not allowed"}},
		"a string where a number belongs": {
			values: "replicaCount: two", want: []string{"at '/replicaCount': got string, want integer"}},
		"a pull secret given as a bare name": {
			values: "imagePullSecrets: [regcred]", want: []string{"at '/imagePullSecrets/0': got string, want object"}},
		"a failure policy outside Ignore and Fail": {
			values: "webhook: {failurePolicy: Sometimes}", want: []string{"at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"}},
		"a webhook timeout above the API server's 30 seconds": {
			values: "webhook: {timeoutSeconds: 60}", want: []string{"at '/webhook/timeoutSeconds': maximum: got 60, want 30"}},
		"a digest that is not sha256": {
			values: "image: {sidecar: {digest: latest}}", want: []string{"at '/image/sidecar/digest': 'latest' does not match pattern"}},
		"both PodDisruptionBudget fields": {
			values: "podDisruptionBudget: {minAvailable: 1, maxUnavailable: 1}", want: []string{"podDisruptionBudget: set minAvailable or maxUnavailable, not both"}},
		"a sampling ratio above 1": {
			values: "tracing: {samplingRatio: 2}", want: []string{"at '/tracing/samplingRatio': maximum: got 2, want 1"}},
		"an OTLP endpoint without a scheme": {
			values: "tracing: {otlpEndpoint: 'otel-collector:4318'}", want: []string{"at '/tracing/otlpEndpoint': 'otel-collector:4318' does not match pattern"}},
		"an unknown key of a monitor": {
			values: "prometheus: {enabled: true}", want: []string{"at '/prometheus': additional properties 'enabled' not allowed"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := runHelmTemplate(t, valuesFile(t, tc.values)...)
			var he *helmError
			if !errors.As(err, &he) {
				t.Fatalf("helm template succeeded or did not run (%v), want it to fail naming %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(he.stderr, w) {
					t.Errorf("helm's error does not contain %q:\n%s", w, he.stderr)
				}
			}
		})
	}
}

// valuesFile writes values (YAML) into a file and returns helm's -f flag for
// it; no values, no flag.
func valuesFile(t *testing.T, values string) []string {
	t.Helper()
	if values == "" {
		return nil
	}
	// Not t.TempDir: helm splits -f at commas, and test names have some.
	dir, err := os.MkdirTemp("", "values")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"-f", f}
}

func (e expect) check(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return manifests.KeyOf(o) == e.obj })
	if e.path == "" {
		if found := i >= 0; found == e.absent {
			t.Errorf("%s rendered: %v, want %v", e.obj, found, !e.absent)
		}
		return
	}
	if i < 0 {
		t.Errorf("%s not rendered", e.obj)
		return
	}
	got, found := lookup(objs[i].Object, e.path)
	switch {
	case e.contains:
		list, _ := got.([]any)
		has := slices.ContainsFunc(list, func(v any) bool { return reflect.DeepEqual(v, parseYAML(t, e.want)) })
		if has == e.absent {
			t.Errorf("%s %s = %v: holding %s is %v, want %v", e.obj, e.path, got, e.want, has, !e.absent)
		}
	case e.absent:
		if found {
			t.Errorf("%s %s = %v, want no such field", e.obj, e.path, got)
		}
	case !found:
		t.Errorf("%s has no %s, want %s", e.obj, e.path, e.want)
	case !reflect.DeepEqual(got, parseYAML(t, e.want)):
		t.Errorf("%s %s = %v, want %s", e.obj, e.path, got, e.want)
	}
}

// lookup is the value at a dotted path of maps and lists (indices as numbers).
func lookup(v any, path string) (any, bool) {
	for step := range strings.SplitSeq(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[step]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// parseYAML parses want as the rendered objects are parsed (numbers as JSON's).
func parseYAML(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}
