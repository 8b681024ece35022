package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/internal/gatewayroute"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// Gateway API routes whose parent is a Service, rendered beside the
// RetryPolicies of a namespace (docs/gateway-api.md#in-the-cluster-the-manager-and-route-status):
//
//	route                                      rendered into
//	producer (its namespace is the Service's)  every namespace the manager renders for (RendersRoutes)
//	consumer (another namespace)               its own namespace only
//	invalid (gatewayroute.Validate)            nowhere; the others are rendered as ever
//
// The sidecar decides between them at request time: a RetryPolicy upstream
// for a host wins over every route, a consumer route over the producer
// routes, then Gateway API's precedence (the older route on a tie).

// RouteInput is what a namespace's rendering takes of the Gateway API
// objects: every route with a Service parent in the cluster and the retry
// budgets of every Service. Zero when the cluster has no Gateway API CRDs.
type RouteInput struct {
	Routes  []gwv1.HTTPRoute
	Budgets gatewayroute.Budgets
}

// RendersRoutes reports whether a namespace gets the producer routes: it
// has a RetryPolicy or an injected pod, the namespaces whose sidecars read a
// rendering. Others get none, so a route does not create a ConfigMap in
// every namespace of the cluster.
func RendersRoutes(policies, injectedPods int) bool {
	return policies > 0 || injectedPods > 0
}

// BudgetsOf are the retry budgets of the policies; an invalid one is left
// out (it names no Service's budget until it is fixed), and returned in
// invalid, oldest first, for a log line.
func BudgetsOf(policies []gwxv1a1.XBackendTrafficPolicy) (budgets gatewayroute.Budgets, invalid []error) {
	budgets = gatewayroute.Budgets{}
	ps := make([]*gwxv1a1.XBackendTrafficPolicy, len(policies))
	for i := range policies {
		ps[i] = &policies[i]
	}
	// The newer policy for a Service is added last: the older one wins.
	slices.SortFunc(ps, func(a, b *gwxv1a1.XBackendTrafficPolicy) int {
		return -compareAge(a.CreationTimestamp.Unix(), a.Namespace+"/"+a.Name, b.CreationTimestamp.Unix(), b.Namespace+"/"+b.Name)
	})
	for _, p := range ps {
		if err := budgets.Add(p); err != nil {
			invalid = append(invalid, err)
		}
	}
	slices.Reverse(invalid)
	return budgets, invalid
}

// compareAge orders by creation (Unix seconds), then by "namespace/name":
// Gateway API's order of age, which decides ties.
func compareAge(createdA int64, nameA string, createdB int64, nameB string) int {
	if c := cmp.Compare(createdA, createdB); c != 0 {
		return c
	}
	return strings.Compare(nameA, nameB)
}

// routePolicies renders, for callers in namespace, every route of in that
// applies to them, one policy per route sorted by (namespace, name); an
// invalid route is left out (its status says why: RouteStatus).
func routePolicies(namespace string, in RouteInput) []policyset.Policy {
	var out []policyset.Policy
	for i := range in.Routes {
		p, err := policyset.FromRoute(&in.Routes[i], namespace, in.Budgets)
		if err != nil || len(p.Upstreams) == 0 {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b policyset.Policy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// isRoutePolicy reports whether p of a rendered document is a route's (its
// upstreams carry a Route), not a RetryPolicy's.
func isRoutePolicy(p policyset.Policy) bool {
	return len(p.Upstreams) > 0 && p.Upstreams[0].Route != nil
}

// withoutRoutes is doc's policies that are RetryPolicies.
func withoutRoutes(policies []policyset.Policy) []policyset.Policy {
	return slices.DeleteFunc(slices.Clone(policies), isRoutePolicy)
}

// hostClaims reports whether a RetryPolicy host pattern ("host",
// "host:port", "*.suffix") covers a route's host ("host" or "host:port"),
// as the sidecar's host match would for a request to it: a pattern without
// a port covers every port of its host.
func hostClaims(pattern, routeHost string) bool {
	pattern, routeHost = strings.ToLower(pattern), strings.ToLower(routeHost)
	if pattern == routeHost {
		return true
	}
	host := routeHost
	if i := strings.LastIndexByte(routeHost, ':'); i >= 0 && !strings.Contains(pattern, ":") {
		host = routeHost[:i]
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok && strings.HasPrefix(suffix, ".") {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return pattern == host
}

// describeRoute is "HTTPRoute namespace/name" for messages.
func describeRoute(r *gwv1.HTTPRoute) string {
	return fmt.Sprintf("%s %s/%s", gatewayroute.KindHTTPRoute, r.Namespace, r.Name)
}
