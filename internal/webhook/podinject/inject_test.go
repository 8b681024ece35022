package podinject

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// go test ./internal/webhook/podinject -run TestGolden -update
var update = flag.Bool("update", false, "rewrite testdata/inject/*.yaml.injected and testdata/tracing/*.yaml.injected")

func testConfig() Config {
	return Config{
		Image:              DefaultImage,
		ImagePullSecrets:   []string{"retry-registry"},
		NoProxy:            DefaultNoProxy,
		Resources:          DefaultResources(),
		ExcludedNamespaces: v1alpha1.ExcludedNamespaces(v1alpha1.OperatorNamespace),
	}
}

// TestGolden runs ShouldInject and Inject over testdata/inject/X.yaml (a
// Namespace and a Pod) and compares with X.yaml.injected: the decision, the
// admission warnings and the resulting pod.
func TestGolden(t *testing.T) {
	golden(t, "inject", testConfig())
}

// TestGoldenTracing is TestGolden over testdata/tracing with the manager's
// tracing flags set.
func TestGoldenTracing(t *testing.T) {
	cfg := testConfig()
	cfg.Tracing = Tracing{OTLPEndpoint: "http://otel-collector.observability.svc:4318", SamplingRatio: 0.25}
	golden(t, "tracing", cfg)
}

func golden(t *testing.T, dir string, cfg Config) {
	inputs, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			ns, pod := readInput(t, in)
			got := render(t, cfg, ns, pod)
			golden := in + ".injected"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is stale (run go test ./internal/webhook/podinject -run TestGolden -update); got:\n%s", golden, got)
			}
		})
	}
}

// TestGoldenFilesHaveInputs fails on a .injected file left behind by a removed input.
func TestGoldenFilesHaveInputs(t *testing.T) {
	outs, _ := filepath.Glob(filepath.Join("testdata", "*", "*.yaml.injected"))
	for _, o := range outs {
		if _, err := os.Stat(strings.TrimSuffix(o, ".injected")); err != nil {
			t.Errorf("%s has no input", o)
		}
	}
}

// TestInjectionIsIdempotent: what the webhook does to its own output is nothing,
// for every golden input.
func TestInjectionIsIdempotent(t *testing.T) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "inject", "*.yaml"))
	cfg := testConfig()
	for _, in := range inputs {
		ns, pod := readInput(t, in)
		once := admit(cfg, ns, pod)
		twice := admit(cfg, ns, once)
		if !equality.Semantic.DeepEqual(once, twice) {
			t.Errorf("%s: a second admission changed the pod", in)
		}
	}
}

// TestCredentialsReachOnlyTheSidecar: in every injected golden pod, the
// sidecar's own API credentials and its token for the quota lease endpoint
// are mounted into the retry-sidecar container and into no other container,
// and no Secret of the namespace is mounted for the sidecar.
func TestCredentialsReachOnlyTheSidecar(t *testing.T) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "inject", "*.yaml"))
	for _, in := range inputs {
		ns, pod := readInput(t, in)
		if ok, _ := testConfig().ShouldInject(ns, pod); !ok {
			continue
		}
		out := admit(testConfig(), ns, pod)
		for _, v := range out.Spec.Volumes {
			if v.Secret != nil && v.Name != "" && strings.HasPrefix(v.Name, "retry-") {
				t.Errorf("%s: the injection mounts Secret %s (volume %s)", in, v.Secret.SecretName, v.Name)
			}
		}
		for _, vol := range []string{APIVolume, QuotaTokenVolume} {
			var mountedIn []string
			for _, c := range append(append([]corev1.Container(nil), out.Spec.InitContainers...), out.Spec.Containers...) {
				for _, m := range c.VolumeMounts {
					if m.Name == vol {
						mountedIn = append(mountedIn, c.Name)
					}
				}
			}
			if len(mountedIn) != 1 || mountedIn[0] != ContainerName {
				t.Errorf("%s: volume %s is mounted into %v, want [%s] only", in, vol, mountedIn, ContainerName)
			}
		}
	}
}

func admit(cfg Config, ns *corev1.Namespace, pod *corev1.Pod) *corev1.Pod {
	if ok, _ := cfg.ShouldInject(ns, pod); ok {
		return cfg.InjectMode(pod, DecideInterception(ns, pod))
	}
	return pod
}

func TestShouldInject(t *testing.T) {
	enabled := map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"}
	tests := map[string]struct {
		nsName   string
		nsLabels map[string]string
		pod      corev1.Pod
		want     bool
		reason   Reason
	}{
		"namespace opted in":                              {nsLabels: enabled, want: true, reason: ReasonNamespaceOptIn},
		"namespace label with another value is no opt-in": {nsLabels: map[string]string{v1alpha1.LabelNamespaceInjection: "true"}, reason: ReasonNotOptedIn},
		"pod opted in, namespace not":                     {pod: podWith(map[string]string{v1alpha1.LabelPodInject: "true"}, false), want: true, reason: ReasonPodOptIn},
		"pod opted out in an opted-in namespace":          {nsLabels: enabled, pod: podWith(map[string]string{v1alpha1.LabelPodInject: "false"}, false), reason: ReasonPodOptOut},
		"nobody opted in":                                 {reason: ReasonNotOptedIn},
		"hostNetwork pod that opted in":                   {pod: podWith(map[string]string{v1alpha1.LabelPodInject: "true"}, true), reason: ReasonHostNetwork},
		"hostNetwork pod nobody opted in":                 {pod: podWith(nil, true), reason: ReasonNotOptedIn},
		"kube-system, even with a pod opt-in":             {nsName: "kube-system", nsLabels: enabled, pod: podWith(map[string]string{v1alpha1.LabelPodInject: "true"}, false), reason: ReasonExcludedNamespace},
		"the operator's own namespace":                    {nsName: "retry-operator-system", nsLabels: enabled, reason: ReasonExcludedNamespace},
		"already injected": {nsLabels: enabled, pod: corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: ContainerName}}}},
			reason: ReasonAlreadyInjected},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.nsName == "" {
				tc.nsName = "shop"
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.nsName, Labels: tc.nsLabels}}
			got, reason := testConfig().ShouldInject(ns, &tc.pod)
			if got != tc.want || reason != tc.reason {
				t.Fatalf("ShouldInject = %v, %s; want %v, %s", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func podWith(labels map[string]string, hostNetwork bool) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{HostNetwork: hostNetwork}}
}

func readInput(t *testing.T, path string) (*corev1.Namespace, *corev1.Pod) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%s: want two YAML documents (Namespace, Pod), got %d", path, len(docs))
	}
	var ns corev1.Namespace
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &ns); err != nil {
		t.Fatalf("%s: namespace: %v", path, err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &pod); err != nil {
		t.Fatalf("%s: pod: %v", path, err)
	}
	return &ns, &pod
}

// render is the golden form: the decision and warnings as comments, then the pod.
func render(t *testing.T, cfg Config, ns *corev1.Namespace, pod *corev1.Pod) []byte {
	t.Helper()
	var b bytes.Buffer
	ok, reason := cfg.ShouldInject(ns, pod)
	fmt.Fprintf(&b, "# shouldInject: %v (%s)\n", ok, reason)
	out := pod
	if ok {
		ic := DecideInterception(ns, pod)
		fmt.Fprintf(&b, "# interception: %s %v\n", ic.Mode, ic.Ports)
		for _, w := range cfg.Warnings(pod, ic) {
			fmt.Fprintf(&b, "# warning: %s\n", w)
		}
		out = cfg.InjectMode(pod, ic)
	}
	y, err := yaml.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(y)
	return b.Bytes()
}

func TestJavaNonProxyHosts(t *testing.T) {
	tests := map[string]struct{ noProxy, want string }{
		"the default list":                           {DefaultNoProxy, "localhost|127.0.0.1|[::1]|kubernetes.default.svc"},
		"a domain suffix becomes a wildcard":         {".corp.example,svc.cluster.local", "*.corp.example|svc.cluster.local"},
		"CIDR ranges and host:port are left out":     {"10.0.0.0/8, api.example:8443 ,db", "db"},
		"bracketed IPv6 stays as it is":              {"[fd00::1]", "[fd00::1]"},
		"a lone star and empty entries are left out": {"*,,", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := JavaNonProxyHosts(tc.noProxy); got != tc.want {
				t.Fatalf("JavaNonProxyHosts(%q) = %q, want %q", tc.noProxy, got, tc.want)
			}
		})
	}
}

func TestDecideInterception(t *testing.T) {
	transparent := map[string]string{v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent}
	tests := map[string]struct {
		nsLabels, nsAnnotations, podLabels, podAnnotations map[string]string
		want                                               Interception
	}{
		"nothing asked: the proxy environment": {want: Interception{Mode: ModeEnvironment}},
		"pod label, default port 80":           {podLabels: transparent, want: Interception{Mode: ModeTransparent, Ports: []uint16{80}}},
		"pod annotation with its ports": {
			podAnnotations: map[string]string{v1alpha1.LabelInterception: "transparent", v1alpha1.AnnotationInterceptPorts: "8080, 80"},
			want:           Interception{Mode: ModeTransparent, Ports: []uint16{8080, 80}}},
		"namespace label, ports from the namespace annotation": {
			nsLabels: transparent, nsAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "9000"},
			want: Interception{Mode: ModeTransparent, Ports: []uint16{9000}}},
		"the pod's ports override the namespace's": {
			nsLabels: transparent, nsAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "9000"},
			podAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "8080"},
			want:           Interception{Mode: ModeTransparent, Ports: []uint16{8080}}},
		"privileged Pod Security allows it": {
			nsLabels: map[string]string{v1alpha1.LabelInterception: "transparent", "pod-security.kubernetes.io/enforce": "privileged"},
			want:     Interception{Mode: ModeTransparent, Ports: []uint16{80}}},
		"baseline Pod Security falls back": {
			nsLabels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}, podLabels: transparent,
			want: Interception{Mode: ModeEnvironment, Fallback: `namespace shop enforces Pod Security "baseline", which refuses the NET_ADMIN and NET_RAW capabilities transparent interception needs; the proxy environment is used (a CNI-based redirect avoids the capabilities, docs/clients.md)`}},
		"an unknown mode falls back": {
			podLabels: map[string]string{v1alpha1.LabelInterception: "iptables"},
			want:      Interception{Mode: ModeEnvironment, Fallback: `pod metadata.labels[retry.dev/interception]: "iptables" is not a known interception mode (allowed: transparent); the proxy environment is used`}},
		"the pod's value overrides the namespace's": {
			nsLabels: transparent, podAnnotations: map[string]string{v1alpha1.LabelInterception: "off"},
			want: Interception{Mode: ModeEnvironment, Fallback: `pod metadata.annotations[retry.dev/interception]: "off" is not a known interception mode (allowed: transparent); the proxy environment is used`}},
		"invalid ports fall back": {
			podLabels: transparent, podAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "http"},
			want: Interception{Mode: ModeEnvironment, Fallback: `pod metadata.annotations[retry.dev/intercept-ports]: "http" is not a port: want comma-separated ports 1-65535 such as 80,8080; transparent interception is off, the proxy environment is used`}},
		"the sidecar's own port falls back": {
			podLabels: transparent, podAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "80,15006"},
			want: Interception{Mode: ModeEnvironment, Fallback: `pod metadata.annotations[retry.dev/intercept-ports]: port 15006 is the sidecar's own (15001, 15020 and 15006 are); transparent interception is off, the proxy environment is used`}},
		"the namespace's invalid ports fall back too": {
			nsLabels: transparent, nsAnnotations: map[string]string{v1alpha1.AnnotationInterceptPorts: "15006,"},
			want: Interception{Mode: ModeEnvironment, Fallback: `namespace metadata.annotations[retry.dev/intercept-ports]: "" is not a port: want comma-separated ports 1-65535 such as 80,8080; transparent interception is off, the proxy environment is used`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: tc.nsLabels, Annotations: tc.nsAnnotations}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tc.podLabels, Annotations: tc.podAnnotations}}
			got := DecideInterception(ns, pod)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("DecideInterception =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestEveryReasonHasASentence: kubectl retry explain says each reason to a
// person; a new Reason without its sentence would print its bare name.
func TestEveryReasonHasASentence(t *testing.T) {
	for _, r := range []Reason{ReasonNamespaceOptIn, ReasonPodOptIn, ReasonNotOptedIn, ReasonPodOptOut,
		ReasonExcludedNamespace, ReasonHostNetwork, ReasonAlreadyInjected} {
		if got := r.Sentence("shop"); got == string(r) || got == "" {
			t.Errorf("%s.Sentence = %q: no sentence of its own", r, got)
		}
	}
	if got, want := ReasonNamespaceOptIn.Sentence("shop"), "namespace shop has retry.dev/injection=enabled"; got != want {
		t.Errorf("Sentence = %q, want %q", got, want)
	}
}
