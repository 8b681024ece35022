package policyset

import (
	"fmt"

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
	out := Policy{Namespace: route.Namespace, Name: route.Name, Generation: route.Generation}
	for _, r := range rules {
		name := r.Upstream.Name
		r.Upstream.Name = "route" // RenderUpstream checks a RetryPolicy's names: routeConfig
		u, err := RenderUpstream(r.Upstream, 1)
		u.Name = name
		if err != nil {
			return Policy{}, fmt.Errorf("HTTPRoute %s/%s: spec.rules[%d]: %w", route.Namespace, route.Name, r.Route.Rule, err)
		}
		cfg, err := routeConfig(u)
		if err == nil {
			_, err = retrypolicy.Compile(cfg)
		}
		if err != nil {
			return Policy{}, fmt.Errorf("HTTPRoute %s/%s: spec.rules[%d]: %w", route.Namespace, route.Name, r.Route.Rule, err)
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
	if err := v1alpha1.DecodeStrict(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if r.Name == "" {
		return fmt.Errorf("%s: metadata.name: Required value", where)
	}
	if r.Namespace == "" {
		r.Namespace = DefaultNamespace
	}
	if parents, _ := gatewayroute.ServiceParents(&r); len(parents) == 0 {
		return fmt.Errorf("HTTPRoute %s/%s: spec.parentRefs: Invalid value: the sidecar applies routes whose parent is a Service (group: \"\", kind: Service); this one has none",
			r.Namespace, r.Name)
	}
	pf.routes = append(pf.routes, &r)
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
	return out, nil
}
