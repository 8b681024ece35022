package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota/storeadmin"
)

// DefaultStoreRecheck is how often a SharedQuota's store is pinged again:
// StoreReachable follows a store that goes away or comes back within it.
const DefaultStoreRecheck = 30 * time.Second

// SharedQuotaReconciler reports on each SharedQuota: Ready (its spec is
// valid), StoreReachable (the manager reaches its store with the admin
// credentials), the consuming upstreams and the pods drawing on it
// (docs/quota.md#status). It relies on QuotaRefIndex, which the RetryPolicy
// controller registers: set that one up first.
type SharedQuotaReconciler struct {
	client.Client
	// Store reaches the stores with the admin credentials.
	Store storeadmin.Admin
	// Recorder emits an event per changed condition.
	Recorder recorder.EventRecorder
	// StoreRecheck is how often the store is pinged again; 0 is DefaultStoreRecheck.
	StoreRecheck time.Duration
	// Forget drops the pods of namespace ns from the store of q, so that the
	// share of a namespace that stopped being a consumer returns to the
	// others at once (docs/quota.md#trust); nil: the store forgets them
	// within quota.LeaseTTL.
	Forget func(ctx context.Context, q *v1alpha1.SharedQuota, ns string) error

	legacyDone sync.Map // stores whose legacy users are deleted: storeKey -> struct{}
}

// The admin credentials Secret is read by name (an uncached Get) in the
// manager's namespace only: config/rbac/quota_admin_secret_role.yaml, a Role
// there, not a ClusterRole.
// +kubebuilder:rbac:groups=policy.retry.dev,resources=sharedquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.retry.dev,resources=sharedquotas/status,verbs=get;patch

// Reconcile gathers the quota, its consuming policies and their pods, pings
// the store, and writes the status when it changed.
func (r *SharedQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var q v1alpha1.SharedQuota
	if err := r.Get(ctx, req.NamespacedName, &q); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	in, err := r.gatherQuota(ctx, &q)
	if err != nil {
		return ctrl.Result{}, err
	}
	left := r.leftConsumers(ctx, &q)
	if err := r.applyQuotaStatus(ctx, &q, ComputeQuotaStatus(in)); err != nil {
		return ctrl.Result{}, err
	}
	r.forget(ctx, &q, left)
	if in.StoreErr == nil && len(v1alpha1.ValidateSharedQuota(defaultedQuota(&q))) == 0 {
		r.deleteLegacyUsers(ctx, q.Spec.Store.Redis)
	}
	recheck := r.StoreRecheck
	if recheck <= 0 {
		recheck = DefaultStoreRecheck
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// QuotaInput is what ComputeQuotaStatus needs of one SharedQuota.
type QuotaInput struct {
	Quota *v1alpha1.SharedQuota
	// Policies are the RetryPolicies whose upstreams name the quota.
	Policies []v1alpha1.RetryPolicy
	// Pods are the injected pods of the policies' namespaces, by namespace.
	Pods map[string][]corev1.Pod
	// StoreErr is the result of pinging the store (nil: reachable); not
	// looked at when the spec is invalid.
	StoreErr error
}

// ComputeQuotaStatus is the desired status of a SharedQuota, pure.
//
//	spec      store answers   Ready              StoreReachable
//	invalid   -               False Invalid      Unknown Invalid
//	valid     yes             True  Valid        True  Reachable
//	valid     no              True  Valid        False Unreachable | AuthFailed | CredentialsNotFound
//
// Consumers are the upstreams, naming the quota, of policies whose newest
// generation is Accepted; drawingPods the ready injected pods those policies
// select, each pod counted once.
func ComputeQuotaStatus(in QuotaInput) v1alpha1.SharedQuotaStatus {
	q := in.Quota.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(q)
	st := v1alpha1.SharedQuotaStatus{ObservedGeneration: q.Generation}
	var ready, store metav1.Condition
	if errs := v1alpha1.ValidateSharedQuota(q); len(errs) > 0 {
		ready = condition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalid, errs.ToAggregate().Error())
		store = condition(v1alpha1.ConditionStoreReachable, metav1.ConditionUnknown, v1alpha1.ReasonInvalid, "not checked: the spec is invalid")
	} else {
		ready = condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonValid, "the spec is valid")
		store = storeCondition(q.Spec.Store.Redis.Address, in.StoreErr)
	}
	st.Conditions = []metav1.Condition{ready, store}
	drawing := map[types.UID]bool{}
	for i := range in.Policies {
		p := &in.Policies[i]
		acc := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if p.DeletionTimestamp != nil || acc == nil || acc.Status != metav1.ConditionTrue || acc.ObservedGeneration != p.Generation {
			continue
		}
		for _, u := range p.Spec.Upstreams {
			if u.QuotaRef != nil && u.QuotaRef.Name == q.Name {
				st.Consumers = append(st.Consumers, v1alpha1.QuotaConsumer{Namespace: p.Namespace, Policy: p.Name, Upstream: u.Name})
			}
		}
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.PodSelector)
		if p.Spec.PodSelector == nil {
			sel, err = labels.Everything(), nil
		}
		if err != nil {
			continue
		}
		for j := range in.Pods[p.Namespace] {
			pod := &in.Pods[p.Namespace][j]
			if podReady(pod) && sel.Matches(labels.Set(pod.Labels)) {
				drawing[pod.UID] = true
			}
		}
	}
	slices.SortFunc(st.Consumers, func(a, b v1alpha1.QuotaConsumer) int {
		return strings.Compare(a.Namespace+"/"+a.Policy+"/"+a.Upstream, b.Namespace+"/"+b.Policy+"/"+b.Upstream)
	})
	st.ConsumerCount = int32(len(st.Consumers))
	if len(st.Consumers) > MaxListedConsumers {
		st.Consumers = st.Consumers[:MaxListedConsumers]
	}
	st.DrawingPods = int32(len(drawing))
	return st
}

// MaxListedConsumers is the schema's bound on status.consumers; consumerCount
// counts them all.
const MaxListedConsumers = 1000

// storeCondition is StoreReachable for the result of a ping of addr.
func storeCondition(addr string, err error) metav1.Condition {
	if err == nil {
		return condition(v1alpha1.ConditionStoreReachable, metav1.ConditionTrue, v1alpha1.ReasonReachable,
			fmt.Sprintf("%s answered PING with the admin credentials", addr))
	}
	var p *storeadmin.Problem
	if errors.As(err, &p) {
		return condition(v1alpha1.ConditionStoreReachable, metav1.ConditionFalse, p.Reason, fmt.Sprintf("%s: %s", addr, p.Message))
	}
	return condition(v1alpha1.ConditionStoreReachable, metav1.ConditionFalse, v1alpha1.ReasonUnreachable, fmt.Sprintf("%s: %v", addr, err))
}

// gatherQuota reads the quota's consuming policies (QuotaRefIndex), the
// injected pods of their namespaces, and pings the store when the spec is
// valid.
func (r *SharedQuotaReconciler) gatherQuota(ctx context.Context, q *v1alpha1.SharedQuota) (QuotaInput, error) {
	in := QuotaInput{Quota: q, Pods: map[string][]corev1.Pod{}}
	var policies v1alpha1.RetryPolicyList
	if err := r.List(ctx, &policies, client.MatchingFields{QuotaRefIndex: q.Name}); err != nil {
		return in, fmt.Errorf("listing RetryPolicies naming SharedQuota %s: %w", q.Name, err)
	}
	in.Policies = policies.Items
	for _, p := range in.Policies {
		if _, done := in.Pods[p.Namespace]; done {
			continue
		}
		var pods corev1.PodList
		if err := r.List(ctx, &pods, client.InNamespace(p.Namespace),
			client.MatchingLabels{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected}); err != nil {
			return in, fmt.Errorf("listing injected pods in %s: %w", p.Namespace, err)
		}
		in.Pods[p.Namespace] = pods.Items
	}
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	if len(v1alpha1.ValidateSharedQuota(d)) == 0 {
		in.StoreErr = r.Store.Ping(ctx, d.Spec.Store.Redis)
	}
	return in, nil
}

// applyQuotaStatus writes st when it differs from q's status, and an event
// per changed condition.
func (r *SharedQuotaReconciler) applyQuotaStatus(ctx context.Context, q *v1alpha1.SharedQuota, st v1alpha1.SharedQuotaStatus) error {
	orig := q.DeepCopy()
	var changed []metav1.Condition
	for _, c := range st.Conditions {
		c.ObservedGeneration = q.Generation
		if meta.SetStatusCondition(&q.Status.Conditions, c) {
			changed = append(changed, c)
		}
	}
	if len(changed) == 0 && q.Status.ObservedGeneration == st.ObservedGeneration && q.Status.DrawingPods == st.DrawingPods &&
		q.Status.ConsumerCount == st.ConsumerCount && equality.Semantic.DeepEqual(q.Status.Consumers, st.Consumers) {
		return nil
	}
	q.Status.ObservedGeneration = st.ObservedGeneration
	q.Status.Consumers = st.Consumers
	q.Status.ConsumerCount = st.ConsumerCount
	q.Status.DrawingPods = st.DrawingPods
	if err := r.Status().Patch(ctx, q, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating status of SharedQuota %s: %w", q.Name, err)
	}
	for _, c := range changed {
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(q, nil, typ, c.Reason, "Check", "%s", c.Message)
		}
	}
	return nil
}

// SetupWithManager registers the controller. Requests are quota names:
//   - SharedQuota: on create, delete and spec changes (its own status writes
//     do not wake it; the StoreRecheck requeue pings the store again);
//   - RetryPolicy: on any change, status included (Accepted decides whether
//     it consumes), for the quotas it names before and after;
//   - injected Pods: on create, delete, readiness or label change, for the
//     quotas the policies of its namespace name (drawingPods).
func (r *SharedQuotaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byPolicy := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		p, ok := o.(*v1alpha1.RetryPolicy)
		if !ok {
			return nil
		}
		return quotaRequests(PolicyQuotaRefs(p))
	})
	byPod := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var policies v1alpha1.RetryPolicyList
		if err := r.List(ctx, &policies, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var names []string
		for i := range policies.Items {
			names = append(names, PolicyQuotaRefs(&policies.Items[i])...)
		}
		slices.Sort(names)
		return quotaRequests(slices.Compact(names))
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sharedquota").
		For(&v1alpha1.SharedQuota{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.RetryPolicy{}, byPolicy).
		Watches(&corev1.Pod{}, byPod, builder.WithPredicates(podChanged())).
		Complete(r)
}

func quotaRequests(names []string) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(names))
	for _, n := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	return out
}

// defaultedQuota is a defaulted copy of q.
func defaultedQuota(q *v1alpha1.SharedQuota) *v1alpha1.SharedQuota {
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	return d
}

// leftConsumers are the namespaces q's status lists as consumers that may no
// longer draw on it: gone, being deleted, or no longer selected by
// consumers.namespaceSelector. An invalid quota has none (its leases are
// refused whoever asks).
func (r *SharedQuotaReconciler) leftConsumers(ctx context.Context, q *v1alpha1.SharedQuota) []string {
	d := defaultedQuota(q)
	if r.Forget == nil || len(v1alpha1.ValidateSharedQuota(d)) > 0 {
		return nil
	}
	var left []string
	for _, c := range q.Status.Consumers {
		if slices.Contains(left, c.Namespace) {
			continue
		}
		var ns corev1.Namespace
		err := r.Get(ctx, types.NamespacedName{Name: c.Namespace}, &ns)
		if err != nil && !apierrors.IsNotFound(err) {
			continue // cannot tell: the endpoint refuses its next lease anyway
		}
		admitted, _ := policyset.Admits(d, ns.Labels)
		if apierrors.IsNotFound(err) || ns.DeletionTimestamp != nil || !admitted {
			left = append(left, c.Namespace)
		}
	}
	return left
}

// forget drops the pods of each namespace of left from q's store. A failure
// is logged: the lease endpoint forgets a namespace on its next refused
// lease, and the store every pod within quota.LeaseTTL.
func (r *SharedQuotaReconciler) forget(ctx context.Context, q *v1alpha1.SharedQuota, left []string) {
	for _, ns := range left {
		if err := r.Forget(ctx, defaultedQuota(q), ns); err != nil {
			logf.FromContext(ctx).Info("forgetting the pods of a namespace that left the consumers failed", "namespace", ns, "error", err.Error())
			continue
		}
		logf.FromContext(ctx).Info("forgot the pods of a namespace that left the consumers", "namespace", ns)
	}
}

// deleteLegacyUsers deletes, once per store and process, the per-namespace
// ACL users earlier releases created on it (docs/operations.md#upgrade). A
// store that cannot be reached is tried again at the next check; one that
// refuses (the admin may not manage users) is logged once.
func (r *SharedQuotaReconciler) deleteLegacyUsers(ctx context.Context, s v1alpha1.RedisStore) {
	key := s.Address
	if s.CredentialsSecretRef != nil {
		key += " " + s.CredentialsSecretRef.Name
	}
	if _, done := r.legacyDone.Load(key); done {
		return
	}
	log := logf.FromContext(ctx).WithValues("store", s.Address)
	deleted, err := r.Store.DeleteLegacyUsers(ctx, s)
	var p *storeadmin.Problem
	if err != nil && errors.As(err, &p) && p.Reason == v1alpha1.ReasonUnreachable {
		return
	}
	r.legacyDone.Store(key, struct{}{})
	switch {
	case err != nil:
		log.Info("cannot delete the per-namespace users of earlier releases", "error", err.Error())
	case len(deleted) > 0:
		log.Info("deleted the per-namespace users of earlier releases", "users", deleted)
	}
}
