package podinject

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// GuardPath is where the webhook server serves the guard of injected
// containers.
const GuardPath = "/validate--v1-pod"

// The injection happens at CREATE; a pod's image (and, should the API server
// ever allow it, a container's security context) can be changed later by
// anyone who may update the pod. The guard refuses such an update to the
// containers the injector added: retry-redirect runs as root with NET_ADMIN
// and NET_RAW, retry-sidecar sees every outbound call of the pod, and neither
// may run an image its pod's owner chooses (a pod kept unscheduled by a
// scheduling gate would otherwise start with it).
//
// The API server calls the guard only for the updates that change an injected
// container's image or security context: the matchCondition below says so in
// CEL, and Guard decides again in Go (the message names the field). So
// failurePolicy Fail costs nothing while the operator is down but those very
// updates: no other pod update (labels, finalizers, scheduling gates, a new app
// image) ever waits for the operator (docs/manager.md).
// +kubebuilder:webhook:path=/validate--v1-pod,mutating=false,failurePolicy=fail,sideEffects=None,groups="",resources=pods,verbs=update,versions=v1,name=guard.retry.dev,admissionReviewVersions=v1,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","retry-operator-system"]}]},"matchConditions":[{"name":"changes-an-injected-container","expression":"[oldObject.spec.?initContainers.orValue([]), oldObject.spec.containers].exists(old, old.exists(o, o.name in ['retry-sidecar', 'retry-redirect'] && ![object.spec.?initContainers.orValue([]), object.spec.containers].exists(now, now.exists(n, n.name == o.name && n.?image == o.?image && n.?securityContext == o.?securityContext))))"}]}`

// injectedContainers are the containers the injector adds, and why each may
// not change.
var injectedContainers = map[string]string{
	RedirectContainerName: "it runs as root with NET_ADMIN and NET_RAW",
	ContainerName:         "it proxies every outbound call of the pod",
}

// InjectedChanges lists what updated changes of the containers the injector
// added to old: a different image or security context of retry-sidecar or
// retry-redirect, each an error naming the field (the index is the
// container's in updated), for example
//
//	spec.initContainers[0].image: Forbidden: retry-redirect was injected by retry-operator and it runs as root with NET_ADMIN and NET_RAW: its image cannot change (it is "retry.dev/retry-sidecar:dev")
//
// None when old has no injected container.
func InjectedChanges(old, updated *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for _, list := range []struct {
		path     *field.Path
		old, now []corev1.Container
	}{
		{spec.Child("initContainers"), old.Spec.InitContainers, updated.Spec.InitContainers},
		{spec.Child("containers"), old.Spec.Containers, updated.Spec.Containers},
	} {
		for _, o := range list.old {
			why, injected := injectedContainers[o.Name]
			if !injected {
				continue
			}
			i := slices.IndexFunc(list.now, func(c corev1.Container) bool { return c.Name == o.Name })
			if i < 0 {
				errs = append(errs, field.Forbidden(list.path, fmt.Sprintf("%s was injected by retry-operator and %s: it cannot be removed", o.Name, why)))
				continue
			}
			n, p := &list.now[i], list.path.Index(i)
			if n.Image != o.Image {
				errs = append(errs, field.Forbidden(p.Child("image"), fmt.Sprintf("%s was injected by retry-operator and %s: its image cannot change (it is %q)", o.Name, why, o.Image)))
			}
			if !equality.Semantic.DeepEqual(n.SecurityContext, o.SecurityContext) {
				errs = append(errs, field.Forbidden(p.Child("securityContext"), fmt.Sprintf("%s was injected by retry-operator and %s: its security context cannot change", o.Name, why)))
			}
		}
	}
	return errs
}

// Guard is the admission handler of the guard: it refuses a pod UPDATE for
// which InjectedChanges reports anything, and allows every other request.
type Guard struct {
	Decoder admission.Decoder
}

// NewGuard builds the guard with the manager's scheme.
func NewGuard(mgr ctrl.Manager) *Guard {
	return &Guard{Decoder: admission.NewDecoder(mgr.GetScheme())}
}

// Handle decides one admission request.
func (g *Guard) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("only UPDATE is checked")
	}
	var old, updated corev1.Pod
	if err := g.Decoder.DecodeRaw(req.OldObject, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := g.Decoder.DecodeRaw(req.Object, &updated); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if errs := InjectedChanges(&old, &updated); len(errs) > 0 {
		logf.FromContext(ctx).Info("refused a change of an injected container", "namespace", req.Namespace, "pod", req.Name,
			"user", req.UserInfo.Username, "fields", len(errs))
		return admission.Denied(errs.ToAggregate().Error())
	}
	return admission.Allowed("")
}
