package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// QuotaRefIndex indexes RetryPolicies by the SharedQuotas their upstreams
// name in quotaRef.
const QuotaRefIndex = "spec.upstreams.quotaRef.name"

// IndexQuotaRefs registers QuotaRefIndex on mgr's cache. The RetryPolicy
// controller registers it; the SharedQuota controller, set up after it, uses
// it too.
func IndexQuotaRefs(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.RetryPolicy{}, QuotaRefIndex, func(o client.Object) []string {
		p, ok := o.(*v1alpha1.RetryPolicy)
		if !ok {
			return nil
		}
		return PolicyQuotaRefs(p)
	}); err != nil {
		return fmt.Errorf("indexing RetryPolicies by SharedQuota: %w", err)
	}
	return nil
}

// PolicyQuotaRefs are the quota names p's upstreams name, sorted, once each.
func PolicyQuotaRefs(p *v1alpha1.RetryPolicy) []string {
	var names []string
	for _, u := range p.Spec.Upstreams {
		if u.QuotaRef != nil {
			names = append(names, u.QuotaRef.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// referencedQuotas reads the SharedQuotas the policies name, by name; one that
// does not exist is left out (Compute reports it: InvalidRef).
func (r *RetryPolicyReconciler) referencedQuotas(ctx context.Context, policies []v1alpha1.RetryPolicy) (map[string]*v1alpha1.SharedQuota, error) {
	quotas := map[string]*v1alpha1.SharedQuota{}
	for i := range policies {
		for _, name := range PolicyQuotaRefs(&policies[i]) {
			if _, done := quotas[name]; done {
				continue
			}
			var q v1alpha1.SharedQuota
			err := r.Get(ctx, types.NamespacedName{Name: name}, &q)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading SharedQuota %s: %w", name, err)
			}
			quotas[name] = &q
		}
	}
	return quotas, nil
}

// quotaConsumers maps a SharedQuota to the requests of every namespace with a
// policy that names it.
func (r *RetryPolicyReconciler) quotaConsumers() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var refs v1alpha1.RetryPolicyList
		if err := r.List(ctx, &refs, client.MatchingFields{QuotaRefIndex: o.GetName()}); err != nil {
			return nil
		}
		seen := map[string]bool{}
		var out []reconcile.Request
		for _, p := range refs.Items {
			if !seen[p.Namespace] {
				seen[p.Namespace] = true
				out = append(out, namespaceRequest(p.Namespace)...)
			}
		}
		return out
	})
}

// labelsChanged passes the updates that change an object's labels, and
// nothing else.
func labelsChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
	}
}
