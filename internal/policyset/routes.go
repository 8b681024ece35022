package policyset

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Gateway API documents a policy file may hold beside RetryPolicies
// (docs/gateway-api.md#policy-files).
var (
	httpRouteAPIVersion     = gwv1.GroupVersion.String()
	backendPolicyAPIVersion = gwxv1a1.GroupVersion.String()
)

// FromRoute renders the rules route gives callers in callerNamespace as one
// Policy (named after the route), with budgets the Services' retry budgets;
// an error names the route and the field. A route that gives these callers
// nothing (a consumer route of another namespace) is a Policy without
// upstreams.
func FromRoute(route *gwv1.HTTPRoute, callerNamespace string, budgets gatewayroute.Budgets) (Policy, error) {
	rules, err := gatewayroute.Translate(route, callerNamespace, budgets)
	if err != nil {
		return Policy{}, err
	}
	return fromRules(route.ObjectMeta, rules)
}

// FromGRPCRoute is FromRoute for a GRPCRoute.
func FromGRPCRoute(route *gwv1.GRPCRoute, callerNamespace string, budgets gatewayroute.Budgets) (Policy, error) {
	rules, err := gatewayroute.TranslateGRPC(route, callerNamespace, budgets)
	if err != nil {
		return Policy{}, err
	}
	return fromRules(route.ObjectMeta, rules)
}

// fromRules renders the rules of the route of meta, checking each as the
// sidecar will compile it.
func fromRules(meta metav1.ObjectMeta, rules []gatewayroute.Rule) (Policy, error) {
	out := Policy{Namespace: meta.Namespace, Name: meta.Name, Generation: meta.Generation}
	for _, r := range rules {
		where := fmt.Sprintf("%s %s/%s: spec.rules[%d]", r.Route.Kind, meta.Namespace, meta.Name, r.Route.Rule)
		name := r.Upstream.Name
		r.Upstream.Name = "route" // RenderUpstream checks a RetryPolicy's names: routeConfig
		u, err := RenderUpstream(r.Upstream, 1)
		u.Name = name
		if err != nil {
			return Policy{}, fmt.Errorf("%s: %w", where, err)
		}
		cfg, err := routeConfig(u)
		if err == nil {
			_, err = retrypolicy.Compile(cfg)
		}
		if err != nil {
			return Policy{}, fmt.Errorf("%s: %w", where, err)
		}
		u.Route = &r.Route
		out.Upstreams = append(out.Upstreams, u)
	}
	return out, nil
}

// addRoute adds an HTTPRoute document: one with no Service parent is an
// error (in a policy file it can only be a mistake).
func (pf *policyFiles) addRoute(raw []byte, where string) error {
	var r gwv1.HTTPRoute
	err := decodeRoute(raw, where, &r, func() bool { p, _ := gatewayroute.ServiceParents(&r); return len(p) > 0 })
	if err == nil {
		pf.routes = append(pf.routes, &r)
	}
	return err
}

// addGRPCRoute adds a GRPCRoute document, as addRoute an HTTPRoute.
func (pf *policyFiles) addGRPCRoute(raw []byte, where string) error {
	var r gwv1.GRPCRoute
	err := decodeRoute(raw, where, &r, func() bool { p, _ := gatewayroute.GRPCServiceParents(&r); return len(p) > 0 })
	if err == nil {
		pf.grpcRoutes = append(pf.grpcRoutes, &r)
	}
	return err
}

// decodeRoute decodes the route document found at where strictly into r,
// in DefaultNamespace when it names none; hasServiceParent says whether a
// parentRef of the decoded route names a Service.
func decodeRoute(raw []byte, where string, r interface {
	metav1.Object
	GetObjectKind() schema.ObjectKind
}, hasServiceParent func() bool) error {
	if err := v1alpha1.DecodeStrict(raw, r); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if r.GetName() == "" {
		return fmt.Errorf("%s: metadata.name: Required value", where)
	}
	if r.GetNamespace() == "" {
		r.SetNamespace(DefaultNamespace)
	}
	if !hasServiceParent() {
		return fmt.Errorf("%s %s/%s: spec.parentRefs: Invalid value: the sidecar applies routes whose parent is a Service (group: \"\", kind: Service); this one has none",
			r.GetObjectKind().GroupVersionKind().Kind, r.GetNamespace(), r.GetName())
	}
	return nil
}

// addBackendPolicy adds an XBackendTrafficPolicy document: the retry budget
// of the Services it targets.
func (pf *policyFiles) addBackendPolicy(raw []byte, where string) error {
	var p gwxv1a1.XBackendTrafficPolicy
	if err := v1alpha1.DecodeStrict(raw, &p); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if p.Namespace == "" {
		p.Namespace = DefaultNamespace
	}
	return pf.budgets.Add(&p)
}

// renderRoutes renders the routes of the files for callers in
// callerNamespace, after every budget is known.
func (pf *policyFiles) renderRoutes(callerNamespace string) ([]Policy, error) {
	var out []Policy
	for _, r := range pf.routes {
		p, err := FromRoute(r, callerNamespace, pf.budgets)
		if err != nil {
			return nil, err
		}
		if len(p.Upstreams) > 0 {
			out = append(out, p)
		}
	}
	for _, r := range pf.grpcRoutes {
		p, err := FromGRPCRoute(r, callerNamespace, pf.budgets)
		if err != nil {
			return nil, err
		}
		if len(p.Upstreams) > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}
