// Package controller renders the RetryPolicies of each namespace into that
// namespace's retry-policies ConfigMap and reports, on every policy, whether it
// is accepted and rendered.
//
// The unit of reconciliation is the namespace, not the policy: conflicts are
// decided between the policies of a namespace and they all share one ConfigMap,
// so one reconcile sees them all, writes the ConfigMap once and the statuses
// that changed. Every event (a policy, its ConfigMap, an injected pod) maps to
// the request {namespace, "retry-policies"}; the work queue folds a burst of
// them into one reconcile.
package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

const (
	// FieldOwner is the server-side apply field manager of the ConfigMap.
	FieldOwner = "retry-operator"
	// ManagedByLabel marks the ConfigMaps this controller renders; the manager's
	// cache holds only those, not every ConfigMap of the cluster.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "retry-operator"
)

// RetryPolicyReconciler reconciles the RetryPolicies of one namespace into its
// retry-policies ConfigMap and their statuses.
type RetryPolicyReconciler struct {
	client.Client
	// Reader reads what the cache does not hold (the sidecars' ClusterRole);
	// nil is Client.
	Reader client.Reader
	// Recorder emits events with the condition reasons (reasons.go).
	Recorder recorder.EventRecorder
	// MaxConcurrentReconciles bounds how many namespaces are reconciled at once.
	MaxConcurrentReconciles int
	// Now is the clock of revisions (policyset.NextRevision); nil is time.Now.
	Now func() time.Time
	// SidecarClusterRole is bound in every namespace with injected pods so
	// their sidecars can watch retry-policies (sidecarrbac.go); empty is
	// DefaultSidecarClusterRole.
	SidecarClusterRole string
	// SidecarConfigURL is where a pod's sidecar answers GET /config; nil is
	// DefaultSidecarConfigURL (the pod IP, port 15090). Tests point it elsewhere.
	SidecarConfigURL func(*corev1.Pod) string
	// CARecheck is how often a namespace whose policies name CA ConfigMaps is
	// rendered again (carefs.go); 0 is DefaultCARecheck.
	CARecheck time.Duration

	// QuotaLease is the lease endpoint the rendered quotas name
	// (docs/quota.md#trust).
	QuotaLease LeaseEndpoint
	// GatewayAPI is which Gateway API kinds the cluster serves
	// (DetectGatewayAPI): their routes are rendered and watched; zero: none.
	GatewayAPI GatewayAPI

	proberOnce sync.Once
	prober     *sidecarProber
	revisions  revisionTracker
}

// The manager writes one ConfigMap per namespace, by name: it applies
// (patch) and deletes retry-policies only, and lists and watches it by name
// (its cache's field selector, cache.go); creating cannot be limited by name.
// It gets any ConfigMap by name because tls.caCertificateRefs may name any
// (carefs.go), but lists and watches no other. docs/operations.md, "RBAC",
// lists every right.
// +kubebuilder:rbac:groups=policy.retry.dev,resources=retrypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.retry.dev,resources=retrypolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=retry-policies,verbs=list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=policy.retry.dev,resources=sharedquotas,verbs=get;list;watch

// Reconcile gathers the namespace's policies, injected pods and current
// ConfigMap, computes the desired state (Compute, pure), and writes only what
// differs: the ConfigMap by server-side apply when its content or owners
// changed, a policy's status when meta.SetStatusCondition reports a change.
func (r *RetryPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g, err := r.gather(ctx, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	out, err := Compute(g.in)
	if err != nil {
		return ctrl.Result{}, err
	}
	if out, err = r.apply(ctx, g, out); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.applyStatuses(ctx, g.policies, out); err != nil {
		return ctrl.Result{}, err
	}
	// Come back until every ready sidecar runs the new revision (bounded),
	// and now and then while the namespace draws on a quota: a renewed
	// serving certificate's CA reaches the rendering within QuotaRecheck.
	after := r.convergeAfter(g.namespace, g.pods, out.Document.Revision)
	if len(out.Document.Quotas) > 0 && (after == 0 || after > QuotaRecheck) {
		after = QuotaRecheck
	}
	if ca := r.caRecheckAfter(g.policies); ca > 0 && (after == 0 || after > ca) {
		after = ca
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// gathered is what one reconcile reads of a namespace.
type gathered struct {
	namespace string
	policies  []v1alpha1.RetryPolicy
	// pods are the injected pods.
	pods []corev1.Pod
	// configMap is the retry-policies ConfigMap, when configMapExists.
	configMap       corev1.ConfigMap
	configMapExists bool
	// namespaceObj is the Namespace (zero if it is gone).
	namespaceObj corev1.Namespace
	// in is Compute's input made of the above.
	in Input
}

// gather reads the namespace's policies, injected pods, retry-policies
// ConfigMap, the Namespace itself and the ConfigMaps the policies name as CA
// certificates, and makes Compute's input of them.
func (r *RetryPolicyReconciler) gather(ctx context.Context, ns string) (*gathered, error) {
	g := &gathered{namespace: ns, configMapExists: true}
	var policies v1alpha1.RetryPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing RetryPolicies in %s: %w", ns, err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected}); err != nil {
		return nil, fmt.Errorf("listing injected pods in %s: %w", ns, err)
	}
	g.policies, g.pods = policies.Items, pods.Items
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &g.configMap); apierrors.IsNotFound(err) {
		g.configMapExists = false
	} else if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, v1alpha1.PoliciesConfigMapName, err)
	}
	if err := r.Get(ctx, types.NamespacedName{Name: ns}, &g.namespaceObj); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("reading Namespace %s: %w", ns, err)
	}
	g.in = Input{Namespace: ns, Policies: g.policies, Now: r.now()}
	var err error
	if g.in.Routes, err = r.gatherRoutes(ctx, g); err != nil {
		return nil, err
	}
	if g.in.ConfigMaps, g.in.CAUnread, err = r.caConfigMaps(ctx, ns, g.policies); err != nil {
		return nil, err
	}
	if g.in.Quotas, err = r.referencedQuotas(ctx, g.policies); err != nil {
		return nil, err
	}
	g.in.NamespaceLabels = g.namespaceObj.Labels
	g.in.Lease = r.QuotaLease.Rendered(ctx)
	if g.configMapExists {
		g.in.Previous = previousDocument(ctx, ns, &g.configMap)
	}
	g.in.Pods = r.podInfos(ns, g.pods)
	return g, nil
}

// previousDocument is the document the retry-policies ConfigMap holds, zero
// when it is unreadable: someone edited it by hand, and it is rebuilt from the
// policies and their status.lastAccepted, with a revision past every one they
// remember.
func previousDocument(ctx context.Context, ns string, cm *corev1.ConfigMap) policyset.Document {
	doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
	if err != nil {
		logf.FromContext(ctx).WithValues("namespace", ns).Info("ignoring unreadable ConfigMap content; rendering from the policies",
			"configMap", v1alpha1.PoliciesConfigMapName, "error", err.Error())
		return policyset.Document{}
	}
	return doc
}

// apply writes the desired state: the sidecars' read access, then the
// ConfigMap, so a status never claims a rendering that is not there yet. It
// returns the output the statuses are to come from (see recountProgrammed).
func (r *RetryPolicyReconciler) apply(ctx context.Context, g *gathered, out Output) (Output, error) {
	if g.namespaceObj.DeletionTimestamp == nil && g.namespaceObj.Name != "" {
		want := wantSidecarBinding(&g.namespaceObj, len(g.pods))
		if err := r.applySidecarBinding(ctx, g.namespace, want, podServiceAccounts(g.pods)); err != nil {
			return Output{}, err
		}
	}
	written, err := r.applyConfigMap(ctx, g.namespace, &g.configMap, g.configMapExists, out)
	if err != nil {
		return Output{}, err
	}
	if written || out.Document.Revision <= 0 {
		return out, nil
	}
	return r.recountProgrammed(ctx, g, out)
}

// recountProgrammed asks which revision each ready sidecar runs, of those not
// known to run out's already, and computes again with the new counts. It is
// called after the ConfigMap is written (so asking never delays a rendering),
// and not in the pass that just wrote a new revision (no sidecar can have it
// yet; the requeue asks). Compute again, with the document just rendered as the
// previous one, changes nothing but the counts.
func (r *RetryPolicyReconciler) recountProgrammed(ctx context.Context, g *gathered, out Output) (Output, error) {
	r.refreshRevisions(ctx, g.namespace, g.pods, out.Document.Revision)
	in := g.in
	in.Pods, in.Previous = r.podInfos(g.namespace, g.pods), out.Document
	return Compute(in)
}

// applyStatuses writes each policy's desired status where it changed. A policy
// that has just become invalid makes it return a TerminalError: retrying cannot
// fix a spec, and the next edit of the policy triggers a new reconcile.
func (r *RetryPolicyReconciler) applyStatuses(ctx context.Context, policies []v1alpha1.RetryPolicy, out Output) error {
	var invalid []string
	for i := range policies {
		p := &policies[i]
		st, ok := out.Status[p.Name]
		if !ok {
			continue
		}
		newlyInvalid, err := r.applyStatus(ctx, p, st)
		if err != nil {
			return err
		}
		if newlyInvalid {
			invalid = append(invalid, fmt.Sprintf("%s (generation %d): %s", p.Name, p.Generation, st.Accepted.Message))
		}
	}
	if len(invalid) > 0 {
		return reconcile.TerminalError(fmt.Errorf("invalid RetryPolicy %s", strings.Join(invalid, "; ")))
	}
	return nil
}

// applyConfigMap makes the ConfigMap hold out.Data, owned by the rendered
// policies, or deletes it when nothing is rendered. It does not write when the
// content, owners and label already match.
func (r *RetryPolicyReconciler) applyConfigMap(ctx context.Context, ns string, cm *corev1.ConfigMap, exists bool, out Output) (written bool, err error) {
	log := logf.FromContext(ctx)
	if out.Data == nil {
		if !exists {
			return false, nil
		}
		// Owner references would let the garbage collector do this once the last
		// policy is gone, but not when policies remain that are all rejected.
		if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting ConfigMap %s/%s: %w", ns, v1alpha1.PoliciesConfigMapName, err)
		}
		log.Info("deleted ConfigMap: no policy is rendered", "configMap", v1alpha1.PoliciesConfigMapName)
		return true, nil
	}

	owners := r.ownerRefs(ns, out)
	if exists && cm.Data[v1alpha1.PoliciesConfigMapKey] == string(out.Data) && len(cm.Data) == 1 &&
		cm.Labels[ManagedByLabel] == ManagedByValue && sameOwners(cm.OwnerReferences, owners) {
		return false, nil
	}
	apply := corev1ac.ConfigMap(v1alpha1.PoliciesConfigMapName, ns).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue}).
		WithData(map[string]string{v1alpha1.PoliciesConfigMapKey: string(out.Data)})
	for _, o := range owners {
		apply.WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind("RetryPolicy").
			WithName(o.Name).WithUID(o.UID))
	}
	if err := r.Apply(ctx, apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying ConfigMap %s/%s: %w", ns, v1alpha1.PoliciesConfigMapName, err)
	}
	log.Info("rendered ConfigMap", "configMap", v1alpha1.PoliciesConfigMapName, "hash", out.Hash, "revision", out.Document.Revision, "policies", len(out.Document.Policies))
	return true, nil
}

// ownerRefs are the rendered RetryPolicies, sorted by name so the list is
// stable (a route, in another namespace or not, is no owner: a ConfigMap of
// routes only is deleted by applyConfigMap when they go).
// None is a controller reference: no single policy owns the namespace's
// ConfigMap, and the garbage collector deletes it only when all are gone.
func (r *RetryPolicyReconciler) ownerRefs(ns string, out Output) []metav1.OwnerReference {
	refs := make([]metav1.OwnerReference, 0, len(out.Document.Policies))
	for _, p := range withoutRoutes(out.Document.Policies) {
		refs = append(refs, metav1.OwnerReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "RetryPolicy", Name: p.Name, UID: out.UIDs[p.Name],
		})
	}
	slices.SortFunc(refs, func(a, b metav1.OwnerReference) int { return strings.Compare(a.Name, b.Name) })
	return refs
}

func sameOwners(have, want []metav1.OwnerReference) bool {
	return slices.EqualFunc(have, want, func(a, b metav1.OwnerReference) bool {
		return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
			a.Controller == nil && a.BlockOwnerDeletion == nil
	})
}

// applyStatus writes the policy's status when it differs from st and emits an
// event per changed condition. It reports whether the policy just became (or
// was first seen) Invalid at this generation.
func (r *RetryPolicyReconciler) applyStatus(ctx context.Context, p *v1alpha1.RetryPolicy, st PolicyStatus) (bool, error) {
	orig := p.DeepCopy()
	acc, prog, ready := st.Accepted, st.Programmed, st.Ready
	acc.ObservedGeneration, prog.ObservedGeneration, ready.ObservedGeneration = p.Generation, p.Generation, p.Generation
	prevProg := meta.FindStatusCondition(orig.Status.Conditions, string(v1alpha1.ConditionProgrammed))

	accChanged := meta.SetStatusCondition(&p.Status.Conditions, acc)
	progChanged := meta.SetStatusCondition(&p.Status.Conditions, prog)
	readyChanged := meta.SetStatusCondition(&p.Status.Conditions, ready)
	changed := accChanged || progChanged || readyChanged || p.Status.ObservedGeneration != p.Generation ||
		p.Status.SelectedPods != st.SelectedPods || p.Status.UpstreamCount != st.UpstreamCount ||
		p.Status.ProgrammedPods != st.ProgrammedPods || !equality.Semantic.DeepEqual(p.Status.LastAccepted, st.LastAccepted)
	if !changed {
		return false, nil
	}
	p.Status.ObservedGeneration = p.Generation
	p.Status.SelectedPods = st.SelectedPods
	p.Status.ProgrammedPods = st.ProgrammedPods
	p.Status.LastAccepted = st.LastAccepted.DeepCopy()
	p.Status.UpstreamCount = st.UpstreamCount
	// The optimistic lock makes a status computed from a stale cache fail (and
	// be retried from fresh data) instead of overwriting a newer one.
	if err := r.Status().Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // deleted meanwhile; its delete event brings us back
		}
		return false, fmt.Errorf("updating status of RetryPolicy %s/%s: %w", p.Namespace, p.Name, err)
	}

	if accChanged {
		typ := corev1.EventTypeNormal
		if acc.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.event(p, typ, acc.Reason, "Validate", acc.Message)
	}
	// A Rendered event when a generation is first rendered, not each time a pod
	// count changes the hash.
	if prog.Status == metav1.ConditionTrue && (prevProg == nil || prevProg.Status != metav1.ConditionTrue ||
		orig.Status.LastAccepted == nil || orig.Status.LastAccepted.Generation != st.RenderedGeneration) {
		r.event(p, corev1.EventTypeNormal, string(v1alpha1.ReasonRendered), "Render", prog.Message)
	}
	return accChanged && acc.Reason == string(v1alpha1.ReasonInvalid), nil
}

func (r *RetryPolicyReconciler) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *RetryPolicyReconciler) event(p *v1alpha1.RetryPolicy, typ, reason, action, note string) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(p, nil, typ, reason, action, "%s", note)
}

func (r *RetryPolicyReconciler) podInfos(ns string, pods []corev1.Pod) []PodInfo {
	out := make([]PodInfo, 0, len(pods))
	for i := range pods {
		out = append(out, PodInfo{Labels: pods[i].Labels, Ready: podReady(&pods[i]), Revision: r.revisions.known(ns, pods[i].UID)})
	}
	return out
}

// podReady: Ready condition True and not terminating. A terminating pod no
// longer takes traffic, so its quota share goes to the others at once.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetupWithManager registers the controller. Events of all three kinds map to
// the namespace's request:
//   - RetryPolicy: on create, delete and spec (generation) changes only, so the
//     controller's own status writes do not wake it;
//   - ConfigMap retry-policies: an edit or delete by someone else is undone;
//   - injected Pods: on create, delete, readiness or label change, for rate
//     sharing, status.selectedPods and the sidecars' RoleBinding;
//   - the sidecars' RoleBinding: a deleted or edited one is restored;
//   - Namespaces: when the retry.dev/sidecar-api-access annotation or the
//     labels change (a quota's consumers.namespaceSelector matches labels);
//   - SharedQuotas: on create, delete and spec changes, every namespace with a
//     policy that names the quota (quotaRefIndex);
//   - HTTPRoutes with a Service parent, when the cluster serves them: a
//     consumer route's namespace, or every rendering namespace for a
//     producer route (routeNamespaces); XBackendTrafficPolicies: every
//     rendering namespace.
//
// The ConfigMap is watched with Watches rather than Owns because it has one
// owner reference per rendered policy and none is a controller reference;
// what must be reconciled when it changes is its namespace, not an owner.
//
// The ConfigMaps named in tls.caCertificateRefs are not watched (a tenant's
// objects are not cached, cache.go): a namespace whose policies name one is
// rendered again every CARecheck (carefs.go).
func (r *RetryPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := IndexQuotaRefs(mgr); err != nil {
		return err
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return namespaceRequest(o.GetNamespace())
	})
	namespaceToItself := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return namespaceRequest(o.GetName())
	})
	named := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("retrypolicy").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Watches(&v1alpha1.RetryPolicy{}, toNamespace, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, toNamespace, builder.WithPredicates(named(v1alpha1.PoliciesConfigMapName))).
		Watches(&corev1.Pod{}, toNamespace, builder.WithPredicates(podChanged())).
		Watches(&rbacv1.RoleBinding{}, toNamespace, builder.WithPredicates(named(SidecarRoleBindingName))).
		Watches(&corev1.Namespace{}, namespaceToItself, builder.WithPredicates(apiAccessChanged())).
		Watches(&corev1.Namespace{}, namespaceToItself, builder.WithPredicates(labelsChanged())).
		Watches(&v1alpha1.SharedQuota{}, r.quotaConsumers(), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	if r.GatewayAPI.HTTPRoutes {
		b = b.Watches(&gwv1.HTTPRoute{}, r.routeNamespaces(), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	if r.GatewayAPI.BackendTrafficPolicies {
		b = b.Watches(&gwxv1a1.XBackendTrafficPolicy{}, r.budgetNamespaces(), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	return b.Complete(r)
}

// namespaceRequest is the one request of namespace ns (the unit of
// reconciliation).
func namespaceRequest(ns string) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}}}
}

// apiAccessChanged passes the Namespace updates that change the
// retry.dev/sidecar-api-access annotation, and nothing else.
func apiAccessChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[v1alpha1.AnnotationSidecarAPIAccess] != e.ObjectNew.GetAnnotations()[v1alpha1.AnnotationSidecarAPIAccess]
		},
	}
}

// podChanged passes the pod events that can change a count of ready selected
// pods: create, delete, and an update that flips readiness or changes labels.
func podChanged() predicate.Predicate {
	return onUpdateIf(func(o, n *corev1.Pod) bool {
		return podReady(o) != podReady(n) || !maps.Equal(o.Labels, n.Labels)
	})
}

// onUpdateIf passes create and delete events, an update when changed says the
// object changed in a way that matters (or is not a T), and no generic event.
func onUpdateIf[T client.Object](changed func(before, after T) bool) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(T)
			n, ok2 := e.ObjectNew.(T)
			if !ok1 || !ok2 {
				return true
			}
			return changed(o, n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
