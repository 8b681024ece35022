package podinject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/interception"
)

// How app traffic reaches the sidecar (docs/clients.md).
const (
	// v1alpha1.LabelInterception and v1alpha1.AnnotationInterceptPorts choose
	// the mode and the ports; the default ports are interception.DefaultPorts, and
	// 443 is never intercepted (interception.TLSPort).
	// RedirectContainerName is the init container that installs the
	// interception rules, before the sidecar starts.
	RedirectContainerName = "retry-redirect"
	// labelPodSecurityEnforce is Pod Security admission's namespace label.
	labelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"
)

// Mode is how app traffic reaches the sidecar.
type Mode string

const (
	// ModeEnvironment: HTTP_PROXY and its equivalents for Node and Java
	// (setProxyEnv). No privileges; reaches the clients that honour them.
	ModeEnvironment Mode = "environment"
	// ModeTransparent: the redirect init container diverts outbound TCP to the
	// intercepted ports to the sidecar's transparent listener. Reaches every
	// client; needs NET_ADMIN and NET_RAW for that one init container.
	ModeTransparent Mode = "transparent"
)

// Interception is the decision for one pod.
type Interception struct {
	Mode Mode
	// Ports are the intercepted ports (ModeTransparent only).
	Ports []uint16
	// Fallback says why transparent interception was asked for and the proxy
	// environment is used instead; "" when nothing fell back. It becomes a
	// Warning event on the pod and an admission warning; the pod is never
	// rejected for it.
	Fallback string
}

// DecideInterception decides how pod's traffic reaches the sidecar. First
// match wins:
//
//	neither pod nor namespace has retry.dev/interception=transparent
//	  (label or annotation)                               environment
//	the value is set but is not "transparent"             environment, Fallback
//	retry.dev/intercept-ports (pod, else namespace) invalid,
//	  or naming one of the sidecar's own ports            environment, Fallback
//	namespace label pod-security.kubernetes.io/enforce
//	  is baseline or restricted (NET_ADMIN is refused)    environment, Fallback
//	otherwise                                             transparent, Ports
//
// A pod-level value overrides the namespace's.
func DecideInterception(ns *corev1.Namespace, pod *corev1.Pod) Interception {
	env := Interception{Mode: ModeEnvironment}
	where, value := interceptionSetting(ns, pod)
	if where == "" {
		return env
	}
	if value != v1alpha1.InterceptionTransparent {
		env.Fallback = fmt.Sprintf("%s[%s]: %q is not a known interception mode (allowed: %s); the proxy environment is used",
			where, v1alpha1.LabelInterception, value, v1alpha1.InterceptionTransparent)
		return env
	}
	portsWhere, ports := "", interception.DefaultPorts
	if v, ok := pod.Annotations[v1alpha1.AnnotationInterceptPorts]; ok {
		portsWhere, ports = "pod metadata.annotations", v
	} else if v, ok := ns.Annotations[v1alpha1.AnnotationInterceptPorts]; ok {
		portsWhere, ports = "namespace metadata.annotations", v
	}
	parsed, err := interception.ParsePorts(ports)
	if i := slices.IndexFunc(parsed, isSidecarPort); err == nil && i >= 0 {
		err = fmt.Errorf("port %d is the sidecar's own (%d, %d and %d are)", parsed[i], v1alpha1.ProxyPort, v1alpha1.AdminPort, v1alpha1.TransparentPort)
	}
	if err != nil {
		env.Fallback = fmt.Sprintf("%s[%s]: %v; transparent interception is off, the proxy environment is used",
			portsWhere, v1alpha1.AnnotationInterceptPorts, err)
		return env
	}
	if level := ns.Labels[labelPodSecurityEnforce]; level == "baseline" || level == "restricted" {
		env.Fallback = fmt.Sprintf("namespace %s enforces Pod Security %q, which refuses the NET_ADMIN and NET_RAW capabilities transparent interception needs; the proxy environment is used (a CNI-based redirect avoids the capabilities, docs/clients.md)",
			ns.Name, level)
		return env
	}
	return Interception{Mode: ModeTransparent, Ports: parsed}
}

func isSidecarPort(p uint16) bool {
	return p == v1alpha1.ProxyPort || p == v1alpha1.AdminPort || p == v1alpha1.TransparentPort
}

// interceptionSetting finds retry.dev/interception: pod label, pod
// annotation, namespace label, namespace annotation, in that order. where is
// "" when none has it.
func interceptionSetting(ns *corev1.Namespace, pod *corev1.Pod) (where, value string) {
	for _, s := range []struct {
		where string
		m     map[string]string
	}{
		{"pod metadata.labels", pod.Labels},
		{"pod metadata.annotations", pod.Annotations},
		{"namespace metadata.labels", ns.Labels},
		{"namespace metadata.annotations", ns.Annotations},
	} {
		if v, ok := s.m[v1alpha1.LabelInterception]; ok {
			return s.where, v
		}
	}
	return "", ""
}

// redirectContainer installs the interception rules and exits. Its security
// context is istio-init's: root (nf_tables needs it in the pod's network
// namespace), only NET_ADMIN and NET_RAW added, everything else dropped, no
// privilege escalation, not privileged.
func (c Config) redirectContainer(ports []uint16) corev1.Container {
	return corev1.Container{
		Name:            RedirectContainerName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Args:            RedirectArgs(ports),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsGroup:               ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			Privileged:               ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// RedirectArgs are the arguments of the sidecar binary in the redirect init
// container: intercept ports, send them to v1alpha1.TransparentPort, spare the
// sidecar's own UID.
func RedirectArgs(ports []uint16) []string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return []string{"redirect", "--ports=" + strings.Join(ps, ","),
		fmt.Sprintf("--to=%d", v1alpha1.TransparentPort), fmt.Sprintf("--exclude-uid=%d", sidecarUID)}
}

// sharesSidecarUID names the containers that run as the sidecar's UID by
// their security context (or the pod's): their traffic is excluded from
// interception with the sidecar's. An image's default user is not visible
// here.
func sharesSidecarUID(pod *corev1.Pod) []string {
	var podUID *int64
	if pod.Spec.SecurityContext != nil {
		podUID = pod.Spec.SecurityContext.RunAsUser
	}
	var names []string
	for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		uid := podUID
		if ctr.SecurityContext != nil && ctr.SecurityContext.RunAsUser != nil {
			uid = ctr.SecurityContext.RunAsUser
		}
		if uid != nil && *uid == sidecarUID {
			names = append(names, ctr.Name)
		}
	}
	return names
}
