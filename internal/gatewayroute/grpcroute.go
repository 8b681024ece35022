package gatewayroute

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// KindGRPCRoute is the kind of the gRPC routes translated.
const KindGRPCRoute = "GRPCRoute"

// TranslateGRPC is Translate for a GRPCRoute. GRPCRoute has no retry or
// timeouts fields: its retries are Linkerd's annotations, with
// retry.linkerd.io/grpc listing the gRPC statuses retried
// (docs/gateway-api.md#grpcroute). A call is retried on a status only when
// its method is one the rule names (its matches' services and methods
// become gRPC patterns of replayableMethods): what the route's author said
// may be sent again. A call refused unprocessed is retried whatever its
// method, as for every gRPC upstream (docs/grpc.md).
func TranslateGRPC(route *gwv1.GRPCRoute, callerNamespace string, budgets Budgets) ([]Rule, error) {
	s, err := linkerdGRPCSettings(route.Annotations)
	if err == nil {
		err = validateGRPCMatches(route).ToAggregate()
	}
	if err != nil {
		return nil, fmt.Errorf("GRPCRoute %s/%s: %w", route.Namespace, route.Name, err)
	}
	all, _ := GRPCServiceParents(route)
	parents, consumer := applying(route.Namespace, callerNamespace, all)
	var out []Rule
	for j, p := range parents {
		for i, rule := range route.Spec.Rules {
			u := s.upstream(ServiceName(p.Service), p.Hosts(callerNamespace))
			u.RetryOn.GRPCStatusCodes = s.grpcCodes
			u.ReplayableMethods = append(append([]string(nil), v1alpha1.DefaultReplayableMethods...), grpcPatterns(rule.Matches)...)
			u.Budget = budgets[p.Service]
			out = append(out, Rule{Upstream: u, Route: Route{
				Kind: KindGRPCRoute, Namespace: route.Namespace, Name: route.Name, Rule: i, Consumer: consumer[j],
				Created: route.CreationTimestamp.Unix(), Matches: grpcMatchesOf(rule.Matches),
			}})
		}
	}
	return out, nil
}

// grpcPatterns are the replayableMethods patterns of a rule's matches: an
// Exact match naming a service and a method is "/service/method", one
// naming a service only "/service/*"; other matches name no method the
// sidecar may resend.
func grpcPatterns(ms []gwv1.GRPCRouteMatch) []string {
	var out []string
	for _, m := range ms {
		mm := m.Method
		if mm == nil || ptr.Deref(mm.Type, gwv1.GRPCMethodMatchExact) != gwv1.GRPCMethodMatchExact || ptr.Deref(mm.Service, "") == "" {
			continue
		}
		out = append(out, "/"+*mm.Service+"/"+ptr.Deref(mm.Method, "*"))
	}
	return out
}

// grpcMatchesOf turns GRPCRoute matches into path matches on the call's
// :path, /service/method.
func grpcMatchesOf(ms []gwv1.GRPCRouteMatch) []RouteMatch {
	out := make([]RouteMatch, 0, len(ms))
	for _, m := range ms {
		rm := RouteMatch{PathType: MatchPathPrefix, Path: "/"}
		if mm := m.Method; mm != nil {
			svc, method := ptr.Deref(mm.Service, ""), ptr.Deref(mm.Method, "")
			switch {
			case ptr.Deref(mm.Type, gwv1.GRPCMethodMatchExact) == gwv1.GRPCMethodMatchRegularExpression:
				rm = RouteMatch{PathType: MatchRegularExpression, Path: "/(?:" + or(svc, "[^/]+") + ")/(?:" + or(method, "[^/]+") + ")"}
			case svc != "" && method != "":
				rm = RouteMatch{PathType: MatchExact, Path: "/" + svc + "/" + method}
			case svc != "":
				rm = RouteMatch{PathType: MatchPathPrefix, Path: "/" + svc}
			case method != "":
				rm = RouteMatch{PathType: MatchRegularExpression, Path: "/[^/]+/" + regexp.QuoteMeta(method)}
			}
		}
		for _, h := range m.Headers {
			rm.Headers = append(rm.Headers, ValueMatch{Type: string(ptr.Deref(h.Type, gwv1.GRPCHeaderMatchExact)), Name: string(h.Name), Value: h.Value})
		}
		out = append(out, rm)
	}
	return out
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// validateGRPCMatches checks the regular expressions of a GRPCRoute's
// matches as they are matched (grpcMatchesOf).
func validateGRPCMatches(route *gwv1.GRPCRoute) field.ErrorList {
	var errs field.ErrorList
	for i, r := range route.Spec.Rules {
		for j, m := range grpcMatchesOf(r.Matches) {
			p := field.NewPath("spec", "rules").Index(i).Child("matches").Index(j)
			for _, e := range validateMatch(m, p) {
				if e.Field == p.Child("path", "value").String() {
					e.Field = p.Child("method").String() // a GRPCRoute names no path
				}
				errs = append(errs, e)
			}
		}
	}
	return errs
}

// linkerdGRPCSettings reads a GRPCRoute's Linkerd annotations: those of an
// HTTPRoute (linkerdSettings), with retry.linkerd.io/grpc listing the gRPC
// statuses retried, in Linkerd's spelling (unavailable, resource-exhausted,
// deadline-exceeded, cancelled, internal, …).
func linkerdGRPCSettings(ann map[string]string) (settings, error) {
	if _, ok := ann[LinkerdRetryHTTP]; ok {
		return settings{}, fmt.Errorf("metadata.annotations[%s]: a GRPCRoute's retries are %s", LinkerdRetryHTTP, LinkerdRetryGRPC)
	}
	s := settings{attempts: 1}
	if v, ok := ann[LinkerdRetryGRPC]; ok {
		for _, name := range strings.Split(v, ",") {
			code := v1alpha1.GRPCStatusCode(strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(name), "-", "_")))
			if _, known := code.Number(); !known || code == "OK" {
				return s, fmt.Errorf("metadata.annotations[%s]: %q is not a gRPC status; allowed: %s", LinkerdRetryGRPC, strings.TrimSpace(name), linkerdGRPCNames())
			}
			s.grpcCodes = append(s.grpcCodes, code)
		}
		if err := s.linkerdRetries(ann); err != nil {
			return s, err
		}
	}
	return s, s.linkerdTimeouts(ann)
}

// linkerdGRPCNames are the gRPC statuses in Linkerd's spelling.
func linkerdGRPCNames() string {
	var names []string
	for _, c := range v1alpha1.GRPCStatusCodes() {
		names = append(names, strings.ToLower(strings.ReplaceAll(string(c), "_", "-")))
	}
	return strings.Join(names, ", ")
}
