package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
)

// routeParentIndex indexes HTTPRoutes by their Service parents
// ("namespace/name"): the routes a Service event, or another route's
// change (a tie in precedence), concerns.
const routeParentIndex = "routeParentService"

// HTTPRouteStatusReconciler writes the manager's entries of status.parents
// of each HTTPRoute with a Service parent (RouteParentStatuses): the unit is
// the route. What is rendered is the RetryPolicy reconciler's business; both
// render a route with the same function (policyset.FromRoute), so what the
// status says is what the ConfigMaps hold.
type HTTPRouteStatusReconciler struct {
	client.Client
}

// Reconcile computes the route's entries from the cache and writes them
// through the status subresource when they changed. The write carries the
// route's resourceVersion: a conflict (someone else wrote meanwhile) is an
// error, and controller-runtime's requeue computes again from fresh data.
func (r *HTTPRouteStatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rt gwv1.HTTPRoute
	if err := r.Get(ctx, req.NamespacedName, &rt); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if parents, _ := gatewayroute.ServiceParents(&rt); len(parents) == 0 {
		return ctrl.Result{}, nil // a Gateway's route: not ours
	}
	in, err := r.gather(ctx, &rt)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !mergeParentStatuses(&rt, RouteParentStatuses(in)) {
		return ctrl.Result{}, nil
	}
	if err := r.Status().Update(ctx, &rt); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("updating status of HTTPRoute %s/%s: %w", rt.Namespace, rt.Name, err)
	}
	return ctrl.Result{}, nil
}

// gather reads, from the cache, the routes sharing a Service parent with
// rt, which of its parents exist, and every RetryPolicy.
func (r *HTTPRouteStatusReconciler) gather(ctx context.Context, rt *gwv1.HTTPRoute) (RouteStatusInput, error) {
	in := RouteStatusInput{Route: rt, Services: sets.New[gatewayroute.NamespacedName]()}
	parents, _ := gatewayroute.ServiceParents(rt)
	seen := sets.New[types.UID]()
	for _, p := range parents {
		var svc corev1.Service
		if err := r.Get(ctx, p.Service, &svc); err == nil {
			in.Services.Insert(p.Service)
		} else if !apierrors.IsNotFound(err) {
			return in, fmt.Errorf("reading Service %s: %w", p.Service, err)
		}
		var routes gwv1.HTTPRouteList
		if err := r.List(ctx, &routes, client.MatchingFields{routeParentIndex: p.Service.String()}); err != nil {
			return in, fmt.Errorf("listing the HTTPRoutes of Service %s: %w", p.Service, err)
		}
		for _, o := range routes.Items {
			if !seen.Has(o.UID) {
				seen.Insert(o.UID)
				in.Routes = append(in.Routes, o)
			}
		}
	}
	var policies v1alpha1.RetryPolicyList
	if err := r.List(ctx, &policies); err != nil {
		return in, fmt.Errorf("listing RetryPolicies: %w", err)
	}
	in.Policies = policies.Items
	return in, nil
}

// SetupWithManager registers the controller; call it only when the cluster
// serves HTTPRoutes (GatewayAPI.HTTPRoutes). A route is reconciled when
//   - it changes (generation), and so are the routes that share a Service
//     parent with it (a tie in precedence comes or goes);
//   - a Service it names as parent is created or deleted;
//   - a RetryPolicy changes (generation): every route with a Service parent
//     (a policy may name any Service's host).
func (r *HTTPRouteStatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &gwv1.HTTPRoute{}, routeParentIndex, routeParents); err != nil {
		return fmt.Errorf("indexing HTTPRoutes by Service parent: %w", err)
	}
	byParent := func(ctx context.Context, services ...string) []reconcile.Request {
		var out []reconcile.Request
		for _, s := range services {
			var routes gwv1.HTTPRouteList
			if err := r.List(ctx, &routes, client.MatchingFields{routeParentIndex: s}); err != nil {
				continue
			}
			for _, o := range routes.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&o)})
			}
		}
		return out
	}
	siblings := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return byParent(ctx, routeParents(o)...)
	})
	service := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return byParent(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}.String())
	})
	everyRoute := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		routes, err := listServiceRoutes(ctx, r.Client)
		if err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(routes))
		for i := range routes {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&routes[i])})
		}
		return out
	})
	createOrDelete := predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("httproute-status").
		For(&gwv1.HTTPRoute{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&gwv1.HTTPRoute{}, siblings, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Service{}, service, builder.WithPredicates(createOrDelete)).
		Watches(&v1alpha1.RetryPolicy{}, everyRoute, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// routeParents are the index values of an HTTPRoute: its Service parents.
func routeParents(o client.Object) []string {
	rt, ok := o.(*gwv1.HTTPRoute)
	if !ok {
		return nil
	}
	parents, _ := gatewayroute.ServiceParents(rt)
	out := make([]string, 0, len(parents))
	for _, p := range parents {
		out = append(out, p.Service.String())
	}
	return out
}
