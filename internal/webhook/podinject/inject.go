// Package podinject is the pod mutating webhook: it decides whether a pod gets
// the retry-sidecar (ShouldInject) and adds it (Inject). Both are pure functions
// of their arguments; the admission handler (webhook.go) only fetches the
// namespace, calls them, and turns the difference into a JSON patch.
package podinject

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/interception"
)

// The injected container and how it is wired.
const (
	ContainerName = "retry-sidecar"
	// The ports are v1alpha1.ProxyPort, AdminPort, TransparentPort and StatsPort.
	// The kubelet cannot reach a pod's loopback (where the admin port listens)
	// with an HTTP probe, so the probes exec the sidecar binary's probe mode,
	// which GETs the endpoint from inside the pod's network namespace.
	// StatsPortName names the stats port, by which Prometheus scrapes it
	// (config/prometheus).
	StatsPortName = "retry-stats"
	// SidecarBinary is the sidecar's path in its image (hack/images and the
	// Dockerfile both put it there).
	SidecarBinary = "/retry-sidecar"

	PoliciesVolume = "retry-sidecar-policies"
	PodInfoVolume  = "retry-sidecar-podinfo"
	PoliciesDir    = "/etc/retry-sidecar/policies"
	PodInfoDir     = "/etc/retry-sidecar/podinfo"
	PodLabelsFile  = PodInfoDir + "/labels"
	// APIVolume is the sidecar's own API credentials (docs/fleet.md): a
	// projected service-account token (audience-bound, expiring, rotated by the
	// kubelet), the cluster CA and the pod's namespace, mounted into the
	// retry-sidecar container only. The app containers get nothing from it.
	APIVolume       = "retry-sidecar-api"
	APIDir          = "/var/run/secrets/retry.dev/serviceaccount"
	apiTokenSeconds = 3600
	// QuotaTokenVolume is the sidecar's credential for the manager's quota
	// lease endpoint (docs/quota.md#trust): a projected service-account token
	// of the pod, audience v1alpha1.QuotaTokenAudience (good for nothing
	// else), expiring after v1alpha1.QuotaTokenSeconds and rotated by the
	// kubelet, mounted at v1alpha1.QuotaTokenDir into the retry-sidecar
	// container only.
	QuotaTokenVolume = "retry-sidecar-quota"
	rootCAConfigMap  = "kube-root-ca.crt"
	sidecarUID       = interception.DefaultExcludeUID
	DefaultNoProxy   = "localhost,127.0.0.1,::1,kubernetes.default.svc"
	DefaultImage     = "retry.dev/retry-sidecar:dev"
	memoryLimitEnv   = "GOMEMLIMIT"
	maxProcsEnv      = "GOMAXPROCS"
	podNamespaceEnv  = "POD_NAMESPACE"
	// defaultMaxProcs bounds the sidecar's Go scheduler when its container has
	// no CPU limit (with one, the runtime follows the limit): on a large node
	// the runtime would otherwise run one scheduler thread per node CPU for a
	// proxy that needs a fraction of one (docs/performance.md#the-remaining-gap).
	defaultMaxProcs = "2"
)

// Reason says why a pod is or is not injected. It is the event reason's detail
// and the admission response's message.
type Reason string

const (
	// ReasonNamespaceOptIn: the namespace has retry.dev/injection=enabled.
	ReasonNamespaceOptIn Reason = "NamespaceOptIn"
	// ReasonPodOptIn: the pod has retry.dev/inject=true.
	ReasonPodOptIn Reason = "PodOptIn"
	// ReasonNotOptedIn: neither the namespace nor the pod asks for the sidecar.
	ReasonNotOptedIn Reason = "NotOptedIn"
	// ReasonPodOptOut: the pod has retry.dev/inject=false.
	ReasonPodOptOut Reason = "PodOptOut"
	// ReasonExcludedNamespace: kube-system or the operator's own namespace,
	// never injected so that a broken sidecar cannot take down the control plane
	// or the operator that would fix it.
	ReasonExcludedNamespace Reason = "ExcludedNamespace"
	// ReasonHostNetwork: a hostNetwork pod shares the node's loopback; its
	// sidecar would collide with every other such pod on ports 15001/15020.
	ReasonHostNetwork Reason = "HostNetwork"
	// ReasonAlreadyInjected: the pod has a retry-sidecar container already
	// (webhook reinvocation, or a pod created from an injected pod's spec).
	ReasonAlreadyInjected Reason = "AlreadyInjected"
)

// Sentence says r to a person, for a pod of namespace ns (kubectl retry
// explain prints it).
func (r Reason) Sentence(ns string) string {
	switch r {
	case ReasonNamespaceOptIn:
		return fmt.Sprintf("namespace %s has %s=enabled", ns, v1alpha1.LabelNamespaceInjection)
	case ReasonPodOptIn:
		return fmt.Sprintf("the pod has %s=true", v1alpha1.LabelPodInject)
	case ReasonNotOptedIn:
		return fmt.Sprintf("neither namespace %s (%s=enabled) nor the pod (%s=true) opted in",
			ns, v1alpha1.LabelNamespaceInjection, v1alpha1.LabelPodInject)
	case ReasonPodOptOut:
		return fmt.Sprintf("the pod has %s=false", v1alpha1.LabelPodInject)
	case ReasonExcludedNamespace:
		return fmt.Sprintf("namespace %s is never injected (the control plane or the operator's own)", ns)
	case ReasonHostNetwork:
		return "the pod uses hostNetwork: a sidecar would collide on the node's loopback ports"
	case ReasonAlreadyInjected:
		return "the pod already has a retry-sidecar container"
	}
	return string(r)
}

// Config is what the injector needs to know; the manager's flags fill it.
type Config struct {
	// Image of the retry-sidecar container.
	Image string
	// ImagePullPolicy of the retry-sidecar container; empty lets the API server default it.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets are added to the pod's imagePullSecrets (each once) so
	// the kubelet can pull Image from a registry that needs credentials. Pull
	// secrets are read from the pod's own namespace: each must exist there
	// (docs/operations.md, "Images").
	ImagePullSecrets []string
	// NoProxy is the NO_PROXY value given to app containers: destinations the
	// sidecar must not see. In-cluster services are NOT in it: policies name them.
	NoProxy string
	// Resources are the sidecar's default requests and limits; the pod's
	// retry.dev/sidecar-* annotations override them one by one.
	Resources corev1.ResourceRequirements
	// ExcludedNamespaces are never injected (kube-system and the operator's namespace).
	ExcludedNamespaces []string
	// TokenAudience is the audience of the sidecar's projected token; empty
	// binds it to the API server's own audience (its --api-audiences), the only
	// one the API server accepts unless configured otherwise.
	TokenAudience string
	// Tracing, when its endpoint is set, makes every injected sidecar export
	// its spans (docs/observability.md#tracing).
	Tracing Tracing
}

// Tracing is what the injector gives sidecars of the manager's
// --tracing-otlp-endpoint and --tracing-sampling-ratio: the standard
// OpenTelemetry environment variables, which the sidecar alone reads.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL
	// (OTEL_EXPORTER_OTLP_ENDPOINT); empty: tracing off, nothing is set.
	OTLPEndpoint string
	// SamplingRatio of the requests that arrive without a sampled parent
	// (OTEL_TRACES_SAMPLER parentbased_traceidratio): 0 to 1.
	SamplingRatio float64
}

// TracingServiceName is the service.name of the sidecars' spans.
const TracingServiceName = "retry-sidecar"

// env is the sidecar's OpenTelemetry environment (none when tracing is off).
func (t Tracing) env() []corev1.EnvVar {
	if t.OTLPEndpoint == "" {
		return nil
	}
	return []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: t.OTLPEndpoint},
		{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
		{Name: "OTEL_TRACES_SAMPLER_ARG", Value: strconv.FormatFloat(t.SamplingRatio, 'g', -1, 64)},
		{Name: "OTEL_SERVICE_NAME", Value: TracingServiceName},
	}
}

// DefaultResources: sized for the targets of docs/performance.md (≤ 50 MiB at 2,000 req/s)
// with headroom, no CPU limit (throttling a proxy adds latency to every call).
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
}

// ShouldInject decides whether pod, in namespace ns, gets the sidecar, and why.
// First match wins:
//
//	namespace excluded (kube-system, operator)   no   ExcludedNamespace
//	pod already has retry-sidecar                no   AlreadyInjected
//	pod label retry.dev/inject=false             no   PodOptOut
//	pod label retry.dev/inject=true              (go on: PodOptIn)
//	namespace label retry.dev/injection=enabled  (go on: NamespaceOptIn)
//	neither                                      no   NotOptedIn
//	spec.hostNetwork                             no   HostNetwork
//	otherwise                                    yes  PodOptIn | NamespaceOptIn
func (c Config) ShouldInject(ns *corev1.Namespace, pod *corev1.Pod) (bool, Reason) {
	if slices.Contains(c.ExcludedNamespaces, ns.Name) {
		return false, ReasonExcludedNamespace
	}
	if hasContainer(pod.Spec.InitContainers, ContainerName) || hasContainer(pod.Spec.Containers, ContainerName) {
		return false, ReasonAlreadyInjected
	}
	var why Reason
	switch {
	case pod.Labels[v1alpha1.LabelPodInject] == "false":
		return false, ReasonPodOptOut
	case pod.Labels[v1alpha1.LabelPodInject] == "true":
		why = ReasonPodOptIn
	case ns.Labels[v1alpha1.LabelNamespaceInjection] == v1alpha1.NamespaceInjectionEnabled:
		why = ReasonNamespaceOptIn
	default:
		return false, ReasonNotOptedIn
	}
	if pod.Spec.HostNetwork {
		return false, ReasonHostNetwork
	}
	return true, why
}

// OptedIn reports whether the namespace or the pod asked for the sidecar: a
// skip is only worth an event for a pod that somebody wanted injected.
func OptedIn(ns *corev1.Namespace, pod *corev1.Pod) bool {
	return pod.Labels[v1alpha1.LabelPodInject] == "true" || ns.Labels[v1alpha1.LabelNamespaceInjection] == v1alpha1.NamespaceInjectionEnabled
}

// Inject is InjectMode with the proxy environment (ModeEnvironment).
func (c Config) Inject(pod *corev1.Pod) *corev1.Pod {
	return c.InjectMode(pod, Interception{Mode: ModeEnvironment})
}

// InjectMode returns a copy of pod with the sidecar added:
//   - retry-sidecar as the FIRST init container with restartPolicy Always (a
//     native sidecar): it starts before, and is available to, every later init
//     container and all app containers, and stops after them;
//   - the retry-policies ConfigMap (optional: the pod starts before any policy
//     exists) and the pod's labels (downward API) mounted read-only;
//   - the sidecar's own API credentials (APIVolume), in the sidecar only, so
//     it watches retry-policies through the API server (docs/fleet.md);
//   - the pod's token for the quota lease endpoint (QuotaTokenVolume), in
//     the sidecar only (docs/quota.md#trust);
//   - ImagePullSecrets, for the sidecar's image;
//   - ModeEnvironment: the proxy environment of every runtime (setProxyEnv)
//     on every app container that has not chosen its own proxy;
//   - ModeTransparent: instead of that environment, the retry-redirect init
//     container before the sidecar (it installs the interception rules and
//     exits) and the sidecar's --transparent-listen;
//   - the label retry.dev/sidecar=injected.
//
// pod is not modified. InjectMode does not check ShouldInject.
func (c Config) InjectMode(pod *corev1.Pod, ic Interception) *corev1.Pod {
	out := pod.DeepCopy()
	res, _ := c.SidecarResources(pod.Annotations)
	sidecar := c.sidecarContainer(res)
	first := []corev1.Container{sidecar}
	if ic.Mode == ModeTransparent {
		sidecar.Args = append(sidecar.Args, fmt.Sprintf("--transparent-listen=127.0.0.1:%d", v1alpha1.TransparentPort))
		first = []corev1.Container{c.redirectContainer(ic.Ports), sidecar}
	}
	out.Spec.InitContainers = append(first, out.Spec.InitContainers...)
	nameServiceAccount(&out.Spec)
	c.addImagePullSecrets(&out.Spec)
	c.addSidecarVolumes(&out.Spec)
	if ic.Mode != ModeTransparent {
		for i := range out.Spec.Containers {
			c.setProxyEnv(&out.Spec.Containers[i])
		}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[v1alpha1.LabelSidecar] = v1alpha1.LabelSidecarInjected
	return out
}

// sidecarEnv is the sidecar's Go runtime settings for resources res.
func sidecarEnv(res corev1.ResourceRequirements) []corev1.EnvVar {
	env := []corev1.EnvVar{{
		// Let the Go runtime collect before the kubelet kills at the limit.
		Name: memoryLimitEnv,
		ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: ContainerName, Resource: "limits.memory"}},
	}}
	if _, limited := res.Limits[corev1.ResourceCPU]; !limited {
		env = append(env, corev1.EnvVar{Name: maxProcsEnv, Value: defaultMaxProcs})
	}
	// The callers a Gateway API route in a --policy-file applies to are
	// those of a namespace (docs/gateway-api.md#hosts).
	return append(env, corev1.EnvVar{Name: podNamespaceEnv,
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
}

// sidecarContainer is the retry-sidecar native sidecar (an init container with
// restartPolicy Always) with resources res, listening as in ModeEnvironment.
func (c Config) sidecarContainer(res corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{
		Name:            ContainerName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Args: []string{
			fmt.Sprintf("--listen=127.0.0.1:%d", v1alpha1.ProxyPort),
			fmt.Sprintf("--admin-listen=127.0.0.1:%d", v1alpha1.AdminPort),
			fmt.Sprintf("--stats-listen=:%d", v1alpha1.StatsPort),
			"--config-dir=" + PoliciesDir,
			"--pod-labels=" + PodLabelsFile,
			"--api-credentials-dir=" + APIDir,
		},
		Env:           append(sidecarEnv(res), c.Tracing.env()...),
		Ports:         []corev1.ContainerPort{{Name: StatsPortName, ContainerPort: v1alpha1.StatsPort, Protocol: corev1.ProtocolTCP}},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		// The startup probe gates the app containers (a native sidecar counts as
		// started once it passes), so it asks only "is the process serving".
		StartupProbe:   probe("/healthz", 1, 30),
		ReadinessProbe: probe("/readyz", 5, 3),
		LivenessProbe:  probe("/healthz", 10, 3),
		Resources:      res,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](sidecarUID),
			RunAsGroup:               ptr.To[int64](sidecarUID),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: PoliciesVolume, MountPath: PoliciesDir, ReadOnly: true},
			{Name: PodInfoVolume, MountPath: PodInfoDir, ReadOnly: true},
			{Name: APIVolume, MountPath: APIDir, ReadOnly: true},
			{Name: QuotaTokenVolume, MountPath: v1alpha1.QuotaTokenDir, ReadOnly: true},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// nameServiceAccount names the pod's service account, which a projected
// service-account token needs. The API server's ServiceAccount admission plugin
// names "default" before any webhook runs; a pod that reaches us without one
// (the plugin disabled) gets the same here.
func nameServiceAccount(spec *corev1.PodSpec) {
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
		if spec.ServiceAccountName == "" {
			spec.ServiceAccountName = "default"
		}
	}
}

// addImagePullSecrets appends each of c.ImagePullSecrets the pod does not
// list yet, after the pod's own.
func (c Config) addImagePullSecrets(spec *corev1.PodSpec) {
	for _, name := range c.ImagePullSecrets {
		if !slices.ContainsFunc(spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name }) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
		}
	}
}

// addSidecarVolumes adds the sidecar's volumes: the retry-policies ConfigMap
// (optional: the pod starts before any policy exists), the pod's labels
// (downward API), the sidecar's own API credentials (APIVolume) and its token
// for the quota lease endpoint (QuotaTokenVolume).
func (c Config) addSidecarVolumes(spec *corev1.PodSpec) {
	addVolume(spec, corev1.Volume{Name: PoliciesVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: v1alpha1.PoliciesConfigMapName},
			Optional:             ptr.To(true),
		}}})
	addVolume(spec, corev1.Volume{Name: PodInfoVolume, VolumeSource: corev1.VolumeSource{
		DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
			Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"},
		}}}}})
	addVolume(spec, corev1.Volume{Name: APIVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o444),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Path: "token", Audience: c.TokenAudience, ExpirationSeconds: ptr.To[int64](apiTokenSeconds)}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMap},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
					Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			},
		}}})
	addVolume(spec, corev1.Volume{Name: QuotaTokenVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o444),
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Path: v1alpha1.QuotaTokenFile, Audience: v1alpha1.QuotaTokenAudience, ExpirationSeconds: ptr.To[int64](v1alpha1.QuotaTokenSeconds)}}},
		}}})
}

// Warnings are the admission warnings of injecting pod with ic: invalid
// resource annotations, a transparent interception that fell back, and app
// containers that share the sidecar's UID (their traffic is not intercepted).
func (c Config) Warnings(pod *corev1.Pod, ic Interception) []string {
	_, warnings := c.SidecarResources(pod.Annotations)
	if ic.Fallback != "" {
		warnings = append(warnings, ic.Fallback)
	}
	if ic.Mode == ModeTransparent {
		if names := sharesSidecarUID(pod); len(names) > 0 {
			warnings = append(warnings, fmt.Sprintf("containers %s run as UID %d, the sidecar's: their traffic is not intercepted (run them as another UID)",
				strings.Join(names, ", "), sidecarUID))
		}
	}
	return warnings
}

// SidecarResources applies the pod's resource annotations to the defaults. An
// annotation that is not a valid quantity is ignored with a warning; a request
// above its limit raises the limit to the request (otherwise the API server
// would reject the whole pod), also with a warning.
func (c Config) SidecarResources(annotations map[string]string) (corev1.ResourceRequirements, []string) {
	res := *c.Resources.DeepCopy()
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	var warnings []string
	for _, o := range []struct {
		key  string
		list corev1.ResourceList
		name corev1.ResourceName
	}{
		{v1alpha1.AnnotationSidecarCPURequest, res.Requests, corev1.ResourceCPU},
		{v1alpha1.AnnotationSidecarCPULimit, res.Limits, corev1.ResourceCPU},
		{v1alpha1.AnnotationSidecarMemoryRequest, res.Requests, corev1.ResourceMemory},
		{v1alpha1.AnnotationSidecarMemoryLimit, res.Limits, corev1.ResourceMemory},
	} {
		v, ok := annotations[o.key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			warnings = append(warnings, fmt.Sprintf("metadata.annotations[%s]: %q is not a positive quantity such as 100m, 64Mi or 1; the default is used", o.key, v))
			continue
		}
		o.list[o.name] = q
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := res.Requests[name]
		lim, hasLim := res.Limits[name]
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			warnings = append(warnings, fmt.Sprintf("retry-sidecar %s request %s is above its limit %s; the limit is raised to %s", name, req.String(), lim.String(), req.String()))
			res.Limits[name] = req
		}
	}
	if len(res.Requests) == 0 {
		res.Requests = nil
	}
	if len(res.Limits) == 0 {
		res.Limits = nil
	}
	return res, warnings
}

func probe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{SidecarBinary, "probe", fmt.Sprintf("http://127.0.0.1:%d%s", v1alpha1.AdminPort, path)}}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   1,
	}
}

func hasContainer(cs []corev1.Container, name string) bool {
	return slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == name })
}

func addVolume(spec *corev1.PodSpec, v corev1.Volume) {
	if slices.ContainsFunc(spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }) {
		return
	}
	spec.Volumes = append(spec.Volumes, v)
}

// The environment that points each runtime at the forward proxy (docs/clients.md
// has the matrix of which client honours which).
const (
	// nodeUseEnvProxy makes Node (>= 22.21 / 24) honour HTTP_PROXY and NO_PROXY
	// in http, https and fetch.
	nodeUseEnvProxy = "NODE_USE_ENV_PROXY"
	// javaToolOptions is read by every JVM at start; the http.proxy* system
	// properties reach HttpURLConnection and java.net.http.HttpClient's default
	// ProxySelector.
	javaToolOptions = "JAVA_TOOL_OPTIONS"
	// javaProxyHostProperty marks JAVA_TOOL_OPTIONS that already choose a proxy.
	javaProxyHostProperty = "-Dhttp.proxyHost="
)

// setProxyEnv gives an app container the proxy environment of every runtime:
//
//	HTTP_PROXY, http_proxy   http://127.0.0.1:15001   (curl, Go, Python, .NET, Ruby)
//	NO_PROXY, no_proxy       Config.NoProxy
//	NODE_USE_ENV_PROXY       1                        (Node >= 22.21: the two above)
//	JAVA_TOOL_OPTIONS        … -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=15001
//	                         -Dhttp.nonProxyHosts=<NO_PROXY in Java's syntax>
//
// A container that sets HTTP_PROXY or http_proxy itself chose its own proxy:
// it gets only NO_PROXY (not even the Node and Java switches, which would turn
// its proxy on for runtimes that ignored it so far). Otherwise each variable the
// container sets itself is kept, except that a literal JAVA_TOOL_OPTIONS without
// a proxy host gets the properties appended (a JVM reads one value; its other
// options stay). A JAVA_TOOL_OPTIONS from valueFrom is left alone. Like every
// rule here this looks at env only: a value that comes from envFrom is
// shadowed by the one set here.
func (c Config) setProxyEnv(ctr *corev1.Container) {
	if hasEnv(ctr, "HTTP_PROXY") || hasEnv(ctr, "http_proxy") {
		setEnvPair(ctr, "NO_PROXY", "no_proxy", c.NoProxy)
		return
	}
	setEnvPair(ctr, "HTTP_PROXY", "http_proxy", fmt.Sprintf("http://127.0.0.1:%d", v1alpha1.ProxyPort))
	setEnvPair(ctr, "NO_PROXY", "no_proxy", c.NoProxy)
	if !hasEnv(ctr, nodeUseEnvProxy) {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: nodeUseEnvProxy, Value: "1"})
	}
	props := fmt.Sprintf("%s127.0.0.1 -Dhttp.proxyPort=%d", javaProxyHostProperty, v1alpha1.ProxyPort)
	if hosts := JavaNonProxyHosts(c.NoProxy); hosts != "" {
		props += " -Dhttp.nonProxyHosts=" + hosts
	}
	i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == javaToolOptions })
	switch {
	case i < 0:
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: javaToolOptions, Value: props})
	case ctr.Env[i].ValueFrom != nil || strings.Contains(ctr.Env[i].Value, javaProxyHostProperty):
		// not ours to change
	case strings.TrimSpace(ctr.Env[i].Value) == "":
		ctr.Env[i].Value = props
	default:
		ctr.Env[i].Value = strings.TrimRight(ctr.Env[i].Value, " ") + " " + props
	}
}

// JavaNonProxyHosts translates a NO_PROXY list into the syntax of Java's
// http.nonProxyHosts: '|'-separated, '*' as a leading or trailing wildcard,
// IPv6 literals in brackets (Java matches the URL's host, which has them).
// Entries Java cannot express (CIDR ranges, "*" alone) are left out.
//
//	"localhost,127.0.0.1,::1,.corp.example,10.0.0.0/8"
//	→ "localhost|127.0.0.1|[::1]|*.corp.example"
func JavaNonProxyHosts(noProxy string) string {
	var out []string
	for _, e := range strings.Split(noProxy, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "" || e == "*" || strings.Contains(e, "/") || strings.ContainsAny(e, "| \t"):
			continue
		case strings.HasPrefix(e, "."):
			e = "*" + e
		case strings.Contains(e, ":") && !strings.HasPrefix(e, "["):
			if ip := net.ParseIP(e); ip != nil {
				e = "[" + e + "]"
			} else {
				continue // host:port: Java matches hosts only
			}
		}
		out = append(out, e)
	}
	return strings.Join(out, "|")
}

func hasEnv(c *corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// setEnvPair sets upper and lower to value unless the container already sets
// either spelling (directly): a pod that chose its own proxy keeps it, and we
// never leave the two spellings pointing at different proxies.
func setEnvPair(c *corev1.Container, upper, lower, value string) {
	if value == "" || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == upper || e.Name == lower }) {
		return
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: upper, Value: value}, corev1.EnvVar{Name: lower, Value: value})
}
