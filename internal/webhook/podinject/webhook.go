package podinject

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the webhook server serves pod injection.
const Path = "/mutate--v1-pod"

// Event reasons on the pod (or, for a pod whose name the API server has not
// generated yet, on its controller: a ReplicaSet, a Job).
const (
	// EventInjected: the sidecar was added; the note says why (NamespaceOptIn, PodOptIn).
	EventInjected = "Injected"
	// EventInjectionSkipped: a pod that opted in (itself or by its namespace)
	// was not injected; the note carries the Reason (HostNetwork, PodOptOut,
	// ExcludedNamespace). Pods nobody opted in get no event: that is most pods.
	EventInjectionSkipped = "InjectionSkipped"
	// EventInterceptionFallback: transparent interception was asked for and
	// cannot be used (Pod Security level, invalid ports or mode); the pod got
	// the proxy environment instead. The note says why.
	EventInterceptionFallback = "InterceptionFallback"
)

// The API server calls the pod webhook only for pods that opted in, through
// two entries with disjoint selectors so no pod is sent twice:
//   - inject.retry.dev: namespaces labelled retry.dev/injection=enabled, pods
//     not labelled retry.dev/inject=false;
//   - pod-inject.retry.dev: every other namespace, pods labelled
//     retry.dev/inject=true.
//
// Both exclude kube-system and the operator's namespace (the second value of
// the NotIn, replaced by kustomize in config/default when deployed elsewhere),
// so a broken sidecar cannot take down the control plane or the operator that
// would fix it. failurePolicy Ignore keeps a down operator from blocking pod
// creation. ShouldInject still decides every case on its own: the selectors
// only spare the API server the calls. sideEffects NoneOnDryRun: events are
// only emitted for real creates.
// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=inject.retry.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"retry.dev/injection","operator":"In","values":["enabled"]},{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","retry-operator-system"]}]},"objectSelector":{"matchExpressions":[{"key":"retry.dev/inject","operator":"NotIn","values":["false"]}]}}`
// +kubebuilder:webhook:path=/mutate--v1-pod,mutating=true,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups="",resources=pods,verbs=create,versions=v1,name=pod-inject.retry.dev,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded,timeoutSeconds=5,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"retry.dev/injection","operator":"NotIn","values":["enabled"]},{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","retry-operator-system"]}]},"objectSelector":{"matchLabels":{"retry.dev/inject":"true"}}}`
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Handler is the admission handler of the pod webhook.
type Handler struct {
	// Reader reads the pod's namespace (from the manager's cache).
	Reader   client.Reader
	Decoder  admission.Decoder
	Config   Config
	Recorder recorder.EventRecorder
}

// WarmCache registers the namespace informer before the manager starts, so it
// syncs with the cache and the first admission request does not wait for it
// (the API server gives this webhook 5 s).
func WarmCache(mgr ctrl.Manager) error {
	if _, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Namespace{}); err != nil {
		return fmt.Errorf("watching namespaces for the pod webhook: %w", err)
	}
	return nil
}

// NewHandler builds the handler from the manager's cache, scheme and recorder.
func NewHandler(mgr ctrl.Manager, cfg Config) *Handler {
	return &Handler{
		Reader:   mgr.GetClient(),
		Decoder:  admission.NewDecoder(mgr.GetScheme()),
		Config:   cfg,
		Recorder: mgr.GetEventRecorder("retry-injector"),
	}
}

// Handle injects the sidecar into a pod being created when ShouldInject says
// so, answering with a JSON patch computed from the original and mutated pod.
// Every other outcome is "allowed, unchanged": this webhook never rejects a pod.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx).WithValues("namespace", req.Namespace, "pod", podName(req))
	if req.Operation != admissionv1.Create {
		return admission.Allowed("only CREATE is handled")
	}
	var pod corev1.Pod
	if err := h.Decoder.Decode(req, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: req.Namespace}}
	if err := h.Reader.Get(ctx, types.NamespacedName{Name: req.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
		// Without the namespace's labels only a pod-level opt-in can be honoured.
		log.Error(err, "reading namespace; deciding from the pod's labels alone")
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: req.Namespace}}
	}
	dryRun := req.DryRun != nil && *req.DryRun

	ok, reason := h.Config.ShouldInject(ns, &pod)
	if !ok {
		log.V(1).Info("not injecting", "reason", reason)
		if OptedIn(ns, &pod) && reason != ReasonAlreadyInjected && !dryRun {
			h.event(&pod, req.Namespace, corev1.EventTypeWarning, EventInjectionSkipped, "retry-sidecar not injected: "+string(reason))
		}
		return admission.Allowed(string(reason))
	}

	ic := DecideInterception(ns, &pod)
	mutated := h.Config.InjectMode(&pod, ic)
	raw, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, raw)
	resp.Warnings = h.Config.Warnings(&pod, ic)
	log.Info("injected retry-sidecar", "reason", reason, "image", h.Config.Image, "interception", ic.Mode, "fallback", ic.Fallback != "")
	if !dryRun {
		h.event(&pod, req.Namespace, corev1.EventTypeNormal, EventInjected, fmt.Sprintf("retry-sidecar injected: %s, interception %s", reason, ic.Mode))
		if ic.Fallback != "" {
			h.event(&pod, req.Namespace, corev1.EventTypeWarning, EventInterceptionFallback, ic.Fallback)
		}
	}
	return resp
}

// event records on the pod when it has a name. A pod created from a template
// (generateName) has none at admission time, so the event goes to its
// controller instead, naming the pod's prefix.
func (h *Handler) event(pod *corev1.Pod, namespace, typ, reason, note string) {
	if h.Recorder == nil {
		return
	}
	if pod.Name != "" {
		p := pod.DeepCopy()
		p.Namespace = namespace
		h.Recorder.Eventf(p, nil, typ, reason, "Inject", "%s", note)
		return
	}
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return // nothing nameable to attach the event to; the log line remains
	}
	regarding := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: owner.APIVersion, Kind: owner.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: namespace, UID: owner.UID},
	}
	h.Recorder.Eventf(regarding, nil, typ, reason, "Inject", "pod %s…: %s", pod.GenerateName, note)
}

func podName(req admission.Request) string {
	if req.Name != "" {
		return req.Name
	}
	var meta struct {
		Metadata struct {
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &meta)
	return meta.Metadata.GenerateName + "(generated)"
}
