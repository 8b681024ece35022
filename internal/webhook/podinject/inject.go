// Package podinject is the pod mutating webhook: it decides whether a pod gets
// the retry-sidecar (ShouldInject) and adds it (Inject). Both are pure functions
// of their arguments; the admission handler (webhook.go) only fetches the
// namespace, calls them, and turns the difference into a JSON patch.
package podinject

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/internal/policyset"
)

// Labels and annotations (SPEC §1 fixes the opt-in/opt-out names).
const (
	// LabelNamespaceInjection on a namespace, value "enabled", injects every pod
	// of the namespace that does not opt out.
	LabelNamespaceInjection = "retry.dev/injection"
	// LabelPodInject on a pod: "true" opts in (whatever the namespace says),
	// "false" opts out.
	LabelPodInject = "retry.dev/inject"
	// LabelSidecar is set by the injector on every pod it injects, value
	// LabelSidecarInjected. The controller watches (and caches) only pods with it.
	LabelSidecar         = "retry.dev/sidecar"
	LabelSidecarInjected = "injected"

	// Resource overrides of the sidecar container, any Kubernetes quantity.
	AnnotationCPURequest    = "retry.dev/sidecar-cpu-request"
	AnnotationCPULimit      = "retry.dev/sidecar-cpu-limit"
	AnnotationMemoryRequest = "retry.dev/sidecar-memory-request"
	AnnotationMemoryLimit   = "retry.dev/sidecar-memory-limit"
)

// The injected container and how it is wired.
const (
	ContainerName = "retry-sidecar"
	// ProxyPort is the forward proxy, bound to loopback: only the pod's own
	// containers can use it.
	ProxyPort = 15001
	// AdminPort serves /healthz, /readyz and /metrics, on loopback too (SPEC §5:
	// the sidecar binds loopback only). The kubelet cannot reach a pod's loopback
	// with an HTTP probe, so the probes exec the sidecar binary's probe mode, which
	// GETs the endpoint from inside the pod's network namespace.
	AdminPort = 15020
	// StatsPort serves /metrics and /config on the pod IP, for Prometheus (the
	// PodMonitor of config/prometheus scrapes the port by its name,
	// StatsPortName). Read-only: nothing on it changes the sidecar.
	StatsPort     = 15090
	StatsPortName = "retry-stats"
	// SidecarBinary is the sidecar's path in its image (hack/images and the
	// Dockerfile both put it there).
	SidecarBinary = "/retry-sidecar"

	PoliciesVolume  = "retry-sidecar-policies"
	PodInfoVolume   = "retry-sidecar-podinfo"
	PoliciesDir     = "/etc/retry-sidecar/policies"
	PodInfoDir      = "/etc/retry-sidecar/podinfo"
	PodLabelsFile   = PodInfoDir + "/labels"
	sidecarUID      = 65532
	DefaultNoProxy  = "localhost,127.0.0.1,::1,kubernetes.default.svc"
	DefaultImage    = "retry.dev/retry-sidecar:dev"
	proxyURL        = "http://127.0.0.1:15001"
	memoryLimitEnv  = "GOMEMLIMIT"
	namespaceEnable = "enabled"
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

// Config is what the injector needs to know; the manager's flags fill it.
type Config struct {
	// Image of the retry-sidecar container.
	Image string
	// ImagePullPolicy of the retry-sidecar container; empty lets the API server default it.
	ImagePullPolicy corev1.PullPolicy
	// NoProxy is the NO_PROXY value given to app containers: destinations the
	// sidecar must not see. In-cluster services are NOT in it: policies name them.
	NoProxy string
	// Resources are the sidecar's default requests and limits; the pod's
	// retry.dev/sidecar-* annotations override them one by one.
	Resources corev1.ResourceRequirements
	// ExcludedNamespaces are never injected (kube-system and the operator's namespace).
	ExcludedNamespaces []string
}

// DefaultResources: sized for the SPEC §8 targets (≤ 50 MiB at 2,000 req/s)
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
	case pod.Labels[LabelPodInject] == "false":
		return false, ReasonPodOptOut
	case pod.Labels[LabelPodInject] == "true":
		why = ReasonPodOptIn
	case ns.Labels[LabelNamespaceInjection] == namespaceEnable:
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
	return pod.Labels[LabelPodInject] == "true" || ns.Labels[LabelNamespaceInjection] == namespaceEnable
}

// Inject returns a copy of pod with the sidecar added:
//   - retry-sidecar as the FIRST init container with restartPolicy Always (a
//     native sidecar): it starts before, and is available to, every later init
//     container and all app containers, and stops after them;
//   - the retry-policies ConfigMap (optional: the pod starts before any policy
//     exists) and the pod's labels (downward API) mounted read-only;
//   - HTTP_PROXY/http_proxy and NO_PROXY/no_proxy on every app container that
//     sets neither spelling itself;
//   - the label retry.dev/sidecar=injected.
//
// pod is not modified. Inject does not check ShouldInject.
func (c Config) Inject(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	res, _ := c.SidecarResources(pod.Annotations)
	sidecar := corev1.Container{
		Name:            ContainerName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Args: []string{
			fmt.Sprintf("--listen=127.0.0.1:%d", ProxyPort),
			fmt.Sprintf("--admin-listen=127.0.0.1:%d", AdminPort),
			fmt.Sprintf("--stats-listen=:%d", StatsPort),
			"--config-dir=" + PoliciesDir,
			"--pod-labels=" + PodLabelsFile,
		},
		Env: []corev1.EnvVar{{
			// Let the Go runtime collect before the kubelet kills at the limit.
			Name: memoryLimitEnv,
			ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				ContainerName: ContainerName, Resource: "limits.memory"}},
		}},
		Ports:         []corev1.ContainerPort{{Name: StatsPortName, ContainerPort: StatsPort, Protocol: corev1.ProtocolTCP}},
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
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	out.Spec.InitContainers = append([]corev1.Container{sidecar}, out.Spec.InitContainers...)

	addVolume(&out.Spec, corev1.Volume{Name: PoliciesVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: policyset.ConfigMapName},
			Optional:             ptr.To(true),
		}}})
	addVolume(&out.Spec, corev1.Volume{Name: PodInfoVolume, VolumeSource: corev1.VolumeSource{
		DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
			Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"},
		}}}}})

	for i := range out.Spec.Containers {
		ctr := &out.Spec.Containers[i]
		setEnvPair(ctr, "HTTP_PROXY", "http_proxy", proxyURL)
		setEnvPair(ctr, "NO_PROXY", "no_proxy", c.NoProxy)
	}

	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[LabelSidecar] = LabelSidecarInjected
	return out
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
		{AnnotationCPURequest, res.Requests, corev1.ResourceCPU},
		{AnnotationCPULimit, res.Limits, corev1.ResourceCPU},
		{AnnotationMemoryRequest, res.Requests, corev1.ResourceMemory},
		{AnnotationMemoryLimit, res.Limits, corev1.ResourceMemory},
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
			Command: []string{SidecarBinary, "probe", fmt.Sprintf("http://127.0.0.1:%d%s", AdminPort, path)}}},
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

// setEnvPair sets upper and lower to value unless the container already sets
// either spelling (directly): a pod that chose its own proxy keeps it, and we
// never leave the two spellings pointing at different proxies.
func setEnvPair(c *corev1.Container, upper, lower, value string) {
	if value == "" || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == upper || e.Name == lower }) {
		return
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: upper, Value: value}, corev1.EnvVar{Name: lower, Value: value})
}
