package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
)

// GatewayAPI says which Gateway API kinds the cluster serves: the manager
// watches only those (a watch of a kind without its CRD never syncs, and
// the manager would not start). Detected once, at start (DetectGatewayAPI):
// CRDs installed later are watched after a restart of the manager.
type GatewayAPI struct {
	// HTTPRoutes: gateway.networking.k8s.io/v1 HTTPRoute is served.
	HTTPRoutes bool
	// BackendTrafficPolicies: gateway.networking.x-k8s.io/v1alpha1
	// XBackendTrafficPolicy is served (experimental channel).
	BackendTrafficPolicies bool
}

// DetectGatewayAPI asks mapper (the API server's discovery) which Gateway
// API kinds are served. A kind that is not is no error; a discovery that
// fails is.
func DetectGatewayAPI(mapper meta.RESTMapper) (GatewayAPI, error) {
	served := func(gv metav1.GroupVersion, kind string) (bool, error) {
		_, err := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version)
		if meta.IsNoMatchError(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("discovering %s %s: %w", gv, kind, err)
		}
		return true, nil
	}
	var g GatewayAPI
	var err error
	if g.HTTPRoutes, err = served(gwv1.GroupVersion, gatewayroute.KindHTTPRoute); err != nil {
		return g, err
	}
	g.BackendTrafficPolicies, err = served(gwxv1a1.GroupVersion, "XBackendTrafficPolicy")
	return g, err
}

// The manager reads HTTPRoutes and XBackendTrafficPolicies, and the Services
// routes name as parents; it writes only its own entries of an HTTPRoute's
// status.parents (docs/manager.md#rbac).
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes/status,verbs=update;patch
// +kubebuilder:rbac:groups=gateway.networking.x-k8s.io,resources=xbackendtrafficpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// gatherRoutes reads what ns's rendering takes of the Gateway API: every
// route with a Service parent and every budget, when the namespace renders
// routes (RendersRoutes) and the cluster serves them.
func (r *RetryPolicyReconciler) gatherRoutes(ctx context.Context, g *gathered) (RouteInput, error) {
	if !r.GatewayAPI.HTTPRoutes || !RendersRoutes(len(g.policies), len(g.pods)) {
		return RouteInput{}, nil
	}
	routes, err := listServiceRoutes(ctx, r.Client)
	if err != nil {
		return RouteInput{}, err
	}
	budgets, err := listBudgets(ctx, r.Client, r.GatewayAPI)
	return RouteInput{Routes: routes, Budgets: budgets}, err
}

// listServiceRoutes lists the HTTPRoutes with a Service parent.
func listServiceRoutes(ctx context.Context, c client.Reader) ([]gwv1.HTTPRoute, error) {
	var list gwv1.HTTPRouteList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing HTTPRoutes: %w", err)
	}
	out := list.Items[:0]
	for _, rt := range list.Items {
		if parents, _ := gatewayroute.ServiceParents(&rt); len(parents) > 0 {
			out = append(out, rt)
		}
	}
	return out, nil
}

// listBudgets reads the retry budgets of every XBackendTrafficPolicy (none
// when the cluster does not serve them).
func listBudgets(ctx context.Context, c client.Reader, g GatewayAPI) (gatewayroute.Budgets, error) {
	if !g.BackendTrafficPolicies {
		return gatewayroute.Budgets{}, nil
	}
	var list gwxv1a1.XBackendTrafficPolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing XBackendTrafficPolicies: %w", err)
	}
	budgets, _ := BudgetsOf(list.Items)
	return budgets, nil
}

// renderingNamespaces are the namespaces that render routes
// (RendersRoutes): those with a RetryPolicy or an injected pod, from the
// cache.
func renderingNamespaces(ctx context.Context, c client.Reader) (sets.Set[string], error) {
	out := sets.New[string]()
	var policies v1alpha1.RetryPolicyList
	if err := c.List(ctx, &policies); err != nil {
		return nil, err
	}
	for _, p := range policies.Items {
		out.Insert(p.Namespace)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingLabels{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected}); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		out.Insert(p.Namespace)
	}
	return out, nil
}

// routeNamespaces maps a route event to the namespaces whose rendering it
// may change: its own, and, for a producer route, every rendering
// namespace. A route without a Service parent changes none.
func (r *RetryPolicyReconciler) routeNamespaces() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		rt, ok := o.(*gwv1.HTTPRoute)
		if !ok {
			return nil
		}
		parents, _ := gatewayroute.ServiceParents(rt)
		producer := false
		for _, p := range parents {
			producer = producer || p.Service.Namespace == rt.Namespace
		}
		switch {
		case len(parents) == 0:
			return nil
		case !producer:
			return namespaceRequest(rt.Namespace)
		}
		return r.everyRenderingNamespace(ctx, rt.Namespace)
	})
}

// everyRenderingNamespace is the request of every rendering namespace and
// of also.
func (r *RetryPolicyReconciler) everyRenderingNamespace(ctx context.Context, also string) []reconcile.Request {
	nss, err := renderingNamespaces(ctx, r.Client)
	if err != nil {
		return namespaceRequest(also)
	}
	var out []reconcile.Request
	for _, ns := range sets.List(nss.Insert(also)) {
		out = append(out, namespaceRequest(ns)...)
	}
	return out
}

// budgetNamespaces maps an XBackendTrafficPolicy event to every rendering
// namespace: a Service's budget is in every caller's rendering.
func (r *RetryPolicyReconciler) budgetNamespaces() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.everyRenderingNamespace(ctx, o.GetNamespace())
	})
}

// linkerdAnnotationPrefixes are the annotations of a route the sidecar
// reads (docs/gateway-api.md#linkerd); the cache keeps no other.
var linkerdAnnotationPrefixes = []string{"retry.linkerd.io/", "timeout.linkerd.io/"}

// slimRoute keeps of an HTTPRoute its spec, status and Linkerd annotations:
// a tenant writes routes, and kubectl's last-applied copy of the spec is no
// business of the cache.
func slimRoute(o any) (any, error) {
	rt, ok := o.(*gwv1.HTTPRoute)
	if !ok {
		return o, nil
	}
	keep := map[string]string{}
	for k, v := range rt.Annotations {
		for _, p := range linkerdAnnotationPrefixes {
			if strings.HasPrefix(k, p) {
				keep[k] = v
			}
		}
	}
	rt.Annotations = nil
	if len(keep) > 0 {
		rt.Annotations = keep
	}
	rt.ManagedFields = nil
	return rt, nil
}

// slimService keeps a Service's identity: a route's parent exists or not.
func slimService(o any) (any, error) {
	s, ok := o.(*corev1.Service)
	if !ok {
		return o, nil
	}
	return &corev1.Service{TypeMeta: s.TypeMeta, ObjectMeta: slimMeta(&s.ObjectMeta)}, nil
}
