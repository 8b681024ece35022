// Package gatewayroute turns Gateway API routes whose parent is a Service
// (GAMMA, east-west traffic) into the upstreams the sidecar enforces:
// HTTPRoute retry and timeouts, the Linkerd 2.16 annotations, and the retry
// budget of an XBackendTrafficPolicy (docs/gateway-api.md). One job a file:
//
//	translate.go   a route's rules into policyset upstreams for one caller namespace
//	parents.go     which parentRefs are Services, and the hosts they cover
//	linkerd.go     the Linkerd annotations
//	budget.go      XBackendTrafficPolicy retryConstraint
package gatewayroute

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/rules"
)

// KindHTTPRoute is the kind of the routes translated.
const KindHTTPRoute = "HTTPRoute"

// Rule is one rule of a route for one Service parent: its retry rules as a
// RetryPolicy upstream (every default still to apply) and the requests it
// applies to.
type Rule struct {
	Upstream v1alpha1.Upstream
	Route    Route
}

// Translate returns the rules route gives callers in callerNamespace:
// one per rule and Service parent that applies to them (producer routes to
// every caller, consumer routes to their own namespace only). budgets gives
// a Service's retry budget (nil: the API default). An invalid route is an
// error naming the field; nothing of it applies then.
func Translate(route *gwv1.HTTPRoute, callerNamespace string, budgets Budgets) ([]Rule, error) {
	if errs := Validate(route); len(errs) > 0 {
		return nil, fmt.Errorf("HTTPRoute %s/%s: %w", route.Namespace, route.Name, errs.ToAggregate())
	}
	all, _ := ServiceParents(route)
	parents, consumer := applying(route.Namespace, callerNamespace, all)
	var out []Rule
	for j, p := range parents {
		for i := range route.Spec.Rules {
			r, err := ruleOf(route, i, p, callerNamespace, budgets[p.Service])
			if err != nil {
				return nil, fmt.Errorf("HTTPRoute %s/%s: %w", route.Namespace, route.Name, err)
			}
			r.Route.Consumer = consumer[j]
			out = append(out, r)
		}
	}
	return out, nil
}

// ruleOf is rule i of route for parent p, as callers in callerNamespace see
// it.
func ruleOf(route *gwv1.HTTPRoute, i int, p Parent, callerNamespace string, budget *v1alpha1.Budget) (Rule, error) {
	rule := &route.Spec.Rules[i]
	s, err := ruleSettings(route, rule)
	if err != nil {
		return Rule{}, field.Invalid(field.NewPath("metadata", "annotations"), "", err.Error())
	}
	u := s.upstream(ServiceName(p.Service), p.Hosts(callerNamespace))
	u.Budget = budget
	return Rule{Upstream: u, Route: Route{
		Kind: KindHTTPRoute, Namespace: route.Namespace, Name: route.Name, Rule: i,
		Created: route.CreationTimestamp.Unix(), Matches: matchesOf(rule.Matches),
	}}, nil
}

// NoTimeoutDeadline is the deadline of a rule whose timeouts.request is 0,
// which Gateway API defines as no timeout: every logical request of the
// sidecar has a deadline (docs/retry-semantics.md), so it is a long one.
const NoTimeoutDeadline = time.Hour

// ServiceName is the upstream name of a Service's route rules: every rule
// for the Service shares it, and with it its budget, metrics and logs. Two
// slashes: no RetryPolicy upstream name (a DNS label, or "policy/upstream")
// can be equal to it.
func ServiceName(svc NamespacedName) string { return "service/" + svc.Namespace + "/" + svc.Name }

// settings are the retry rules of one route rule, from its fields or its
// route's Linkerd annotations.
type settings struct {
	codes          []int
	grpcCodes      []v1alpha1.GRPCStatusCode // a GRPCRoute's (linkerdGRPCSettings)
	attempts       int32                     // transmissions, the first included
	request        *time.Duration            // nil: the API's default deadline; 0: no timeout
	backendRequest time.Duration
	backoff        time.Duration // the minimum wait; 0 = the API default backoff
}

// ruleSettings reads a rule's retry and timeouts; where the rule has
// neither, the route's Linkerd annotations (docs/gateway-api.md#linkerd).
func ruleSettings(route *gwv1.HTTPRoute, rule *gwv1.HTTPRouteRule) (settings, error) {
	s := settings{attempts: 1}
	if rule.Retry == nil && rule.Timeouts == nil {
		return linkerdSettings(route.Annotations)
	}
	if r := rule.Retry; r != nil {
		for _, c := range r.Codes {
			s.codes = append(s.codes, int(c))
		}
		s.attempts = v1alpha1.DefaultMaxAttempts
		if r.Attempts != nil {
			s.attempts = int32(*r.Attempts) + 1
		}
		if r.Backoff != nil {
			s.backoff, _ = time.ParseDuration(string(*r.Backoff))
		}
	}
	if t := rule.Timeouts; t != nil {
		if t.Request != nil {
			d, _ := time.ParseDuration(string(*t.Request))
			s.request = &d
		}
		if t.BackendRequest != nil {
			s.backendRequest, _ = time.ParseDuration(string(*t.BackendRequest))
		}
	}
	return s, nil
}

// upstream is s as a RetryPolicy upstream: Gateway API's meaning in our
// terms. Connection failures and resets before the response are retried
// (what Gateway API asks of an implementation with a retry stanza); the
// backoff is a minimum never shortened (no jitter below it); a request
// timeout of 0 ("no timeout") is NoTimeoutDeadline, and none at all the
// API's default deadline.
func (s settings) upstream(name string, hosts []string) v1alpha1.Upstream {
	u := v1alpha1.Upstream{Name: name, Hosts: hosts, MaxAttempts: ptr.To(s.attempts)}
	u.RetryOn = &v1alpha1.RetryOn{ConnectFailure: ptr.To(true), ResetBeforeHeaders: ptr.To(s.attempts > 1)}
	u.RetryOn.StatusCodes = []v1alpha1.StatusCode{}
	for _, c := range s.codes {
		u.RetryOn.StatusCodes = append(u.RetryOn.StatusCodes, v1alpha1.StatusCode(c))
	}
	deadline := ptr.Deref(s.request, 0)
	switch {
	case s.request == nil:
		deadline, _ = rules.ParseDuration(string(v1alpha1.DefaultDeadline))
	case deadline == 0:
		deadline = NoTimeoutDeadline
	}
	u.Deadline = apiDuration(deadline)
	if s.backendRequest > 0 && s.backendRequest < deadline {
		u.PerTryTimeout = apiDuration(s.backendRequest)
	}
	if s.backoff > 0 {
		jitter := v1alpha1.JitterNone
		u.Backoff = &v1alpha1.Backoff{Base: apiDuration(s.backoff), Max: apiDuration(s.backoff), Jitter: &jitter}
	}
	return u
}

func apiDuration(d time.Duration) *v1alpha1.Duration {
	s := v1alpha1.Duration(strings.Replace(d.String(), "µs", "us", 1))
	return &s
}

// matchesOf converts a rule's matches with Gateway API's defaults applied (a
// path match without a type is a PathPrefix; a header or query match without
// a type is Exact).
func matchesOf(ms []gwv1.HTTPRouteMatch) []RouteMatch {
	out := make([]RouteMatch, 0, len(ms))
	for _, m := range ms {
		rm := RouteMatch{PathType: MatchPathPrefix, Path: "/"}
		if p := m.Path; p != nil {
			rm.PathType = string(ptr.Deref(p.Type, gwv1.PathMatchPathPrefix))
			rm.Path = ptr.Deref(p.Value, "/")
		}
		if m.Method != nil {
			rm.Method = string(*m.Method)
		}
		for _, h := range m.Headers {
			rm.Headers = append(rm.Headers, ValueMatch{
				Type: string(ptr.Deref(h.Type, gwv1.HeaderMatchExact)), Name: string(h.Name), Value: h.Value})
		}
		for _, q := range m.QueryParams {
			rm.QueryParams = append(rm.QueryParams, ValueMatch{
				Type: string(ptr.Deref(q.Type, gwv1.QueryParamMatchExact)), Name: string(q.Name), Value: q.Value})
		}
		out = append(out, rm)
	}
	return out
}
