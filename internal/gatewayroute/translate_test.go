package gatewayroute

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

func routeYAML(t *testing.T, doc string) *gwv1.HTTPRoute {
	t.Helper()
	var r gwv1.HTTPRoute
	if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

const producerRoute = `
metadata: {name: payments-retries, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: payments, port: 8080}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}, method: GET}]
    retry: {codes: [503, 429], attempts: 2, backoff: 250ms}
    timeouts: {request: 3s, backendRequest: 1s}
  - timeouts: {request: "0s"}
`

// TestTranslateMapsEveryRouteFieldToTheUpstream: what each field of a rule
// becomes, exactly.
func TestTranslateMapsEveryRouteFieldToTheUpstream(t *testing.T) {
	route := routeYAML(t, producerRoute)
	rules, err := Translate(route, "shop", Budgets{{Namespace: "shop", Name: "payments"}: {RetryPercent: ptr.To[int32](5)}})
	if err != nil {
		t.Fatal(err)
	}
	jitterNone := v1alpha1.JitterNone
	dur := func(s string) *v1alpha1.Duration { d := v1alpha1.Duration(s); return &d }
	hosts := []string{"payments:8080", "payments.shop:8080", "payments.shop.svc:8080", "payments.shop.svc.cluster.local:8080"}
	want := []Rule{{
		Upstream: v1alpha1.Upstream{
			Name: "service/shop/payments", Hosts: hosts, MaxAttempts: ptr.To[int32](3),
			Deadline: dur("3s"), PerTryTimeout: dur("1s"),
			Backoff: &v1alpha1.Backoff{Base: dur("250ms"), Max: dur("250ms"), Jitter: &jitterNone},
			RetryOn: &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{503, 429}, ConnectFailure: ptr.To(true), ResetBeforeHeaders: ptr.To(true)},
			Budget:  &v1alpha1.Budget{RetryPercent: ptr.To[int32](5)},
		},
		Route: Route{Kind: "HTTPRoute", Namespace: "shop", Name: "payments-retries", Rule: 0, Created: route.CreationTimestamp.Unix(),
			Matches: []RouteMatch{{PathType: "PathPrefix", Path: "/api", Method: "GET"}}},
	}, {
		Upstream: v1alpha1.Upstream{
			Name: "service/shop/payments", Hosts: hosts, MaxAttempts: ptr.To[int32](1), Deadline: dur("1h0m0s"),
			RetryOn: &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{}, ConnectFailure: ptr.To(true), ResetBeforeHeaders: ptr.To(false)},
			Budget:  &v1alpha1.Budget{RetryPercent: ptr.To[int32](5)},
		},
		Route: Route{Kind: "HTTPRoute", Namespace: "shop", Name: "payments-retries", Rule: 1, Created: route.CreationTimestamp.Unix(),
			Matches: []RouteMatch{}},
	}}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("Translate (-want +got):\n%s", diff)
	}
}

// TestTranslateScopesRoutesByNamespace: a producer route applies to every
// caller (the short name only in its namespace), a consumer route to its own
// namespace only.
func TestTranslateScopesRoutesByNamespace(t *testing.T) {
	consumer := `
metadata: {name: mine, namespace: checkout}
spec:
  parentRefs: [{group: "", kind: Service, name: payments, namespace: shop}]
  rules: [{retry: {codes: [503]}}]
`
	for _, c := range []struct {
		name, route, caller string
		wantHosts           []string
		wantConsumer        bool
	}{
		{"a producer route in its own namespace has the short name", producerRoute, "shop",
			[]string{"payments:8080", "payments.shop:8080", "payments.shop.svc:8080", "payments.shop.svc.cluster.local:8080"}, false},
		{"a producer route elsewhere has the qualified names", producerRoute, "checkout",
			[]string{"payments.shop:8080", "payments.shop.svc:8080", "payments.shop.svc.cluster.local:8080"}, false},
		{"a consumer route applies to its namespace, on every port", consumer, "checkout",
			[]string{"payments.shop", "payments.shop.svc", "payments.shop.svc.cluster.local"}, true},
		{"a consumer route applies to no other namespace", consumer, "billing", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rules, err := Translate(routeYAML(t, c.route), c.caller, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.wantHosts == nil {
				if len(rules) != 0 {
					t.Fatalf("got %d rules; want none", len(rules))
				}
				return
			}
			if diff := cmp.Diff(c.wantHosts, rules[0].Upstream.Hosts); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
			if rules[0].Route.Consumer != c.wantConsumer {
				t.Errorf("consumer = %v; want %v", rules[0].Route.Consumer, c.wantConsumer)
			}
		})
	}
}

// TestTranslateRefusesInvalidRoutesNamingTheField: bad input is an error that
// names the field and what is allowed; nothing of the route applies.
func TestTranslateRefusesInvalidRoutesNamingTheField(t *testing.T) {
	rule := func(s string) string {
		return "metadata: {name: r, namespace: shop}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: payments}]\n  rules:\n  - " + s + "\n"
	}
	for _, c := range []struct{ name, route, want string }{
		{"a code outside 400-599", rule("retry: {codes: [302]}"),
			`spec.rules[0].retry.codes[0]: Invalid value: 302: must be between 400 and 599`},
		{"a code the sidecar does not retry", rule("retry: {codes: [404]}"),
			`spec.rules[0].retry.codes[0]: Unsupported value: 404: supported values: "408", "425", "429", "500", "502", "503", "504"`},
		{"attempts beyond the sidecar's range", rule("retry: {attempts: 10}"),
			`spec.rules[0].retry.attempts: Invalid value: 10: must be between 1 and 9 (retries: the sidecar sends at most 10 times)`},
		{"a backendRequest longer than the request", rule("timeouts: {request: 1s, backendRequest: 2s}"),
			`spec.rules[0].timeouts.backendRequest: Invalid value: "2s": must be <= timeouts.request (1s)`},
		{"a duration that does not parse", rule("timeouts: {request: soon}"),
			`spec.rules[0].timeouts.request: Invalid value: "soon": must be a duration such as 10s or 500ms`},
		{"a path expression that does not compile", rule("matches: [{path: {type: RegularExpression, value: '/v[0-9'}}]"),
			`spec.rules[0].matches[0].path.value: Invalid value: "/v[0-9": does not compile: error parsing regexp: missing closing ]: ` + "`[0-9)$`"},
		{"a path expression too costly", rule("matches: [{path: {type: RegularExpression, value: '((ab|cd|ef){25}){25}'}}]"),
			`spec.rules[0].matches[0].path.value: Invalid value: "((ab|cd|ef){25}){25}": is too costly: 6304 instructions, at most 2000 (a repetition count multiplies its operand)`},
		{"a header expression that does not compile", rule("matches: [{headers: [{type: RegularExpression, name: x, value: '('}]}]"),
			`spec.rules[0].matches[0].headers[0].value: Invalid value: "(": does not compile: error parsing regexp: missing closing ): ` + "`^(?:()$`"},
		{"a Linkerd limit that is not a number", "metadata: {name: r, namespace: shop, annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: many}}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: payments}]\n  rules: [{}]\n",
			`metadata.annotations: Invalid value: "": retry.linkerd.io/limit: must be a number of retries between 0 and 9 (got "many")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Translate(routeYAML(t, c.route), "shop", nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Translate error = %v\nwant it to contain %s", err, c.want)
			}
		})
	}
}

// TestLinkerdAnnotationsBecomeRetries: a route without retry and timeouts
// fields gets Linkerd's annotations, as Linkerd 2.16 reads them.
func TestLinkerdAnnotationsBecomeRetries(t *testing.T) {
	for _, c := range []struct {
		name         string
		ann          map[string]string
		wantCodes    []int
		wantAttempts int32
		wantRequest  string // "" = the API's default deadline
		wantBackend  string
	}{
		{"5xx with the default limit of one retry", map[string]string{LinkerdRetryHTTP: "5xx"}, []int{500, 502, 503, 504}, 2, "", ""},
		{"gateway-error, 429 and a limit", map[string]string{LinkerdRetryHTTP: "gateway-error,429", LinkerdRetryLimit: "3"}, []int{429, 502, 503, 504}, 4, "", ""},
		{"a range and a retry timeout", map[string]string{LinkerdRetryHTTP: "500-503", LinkerdRetryTimeout: "300ms"}, []int{500, 502, 503}, 2, "", "300ms"},
		{"the shorter of the request and response timeouts bounds the call", map[string]string{
			LinkerdTimeoutRequest: "5s", LinkerdTimeoutResponse: "2s"}, nil, 1, "2s", ""},
		{"a retry timeout as long as the call's is no bound of its own", map[string]string{
			LinkerdRetryHTTP: "503", LinkerdRetryTimeout: "2s", LinkerdTimeoutRequest: "2s"}, []int{503}, 2, "2s", ""},
		{"no annotation, no retry", map[string]string{}, nil, 1, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := linkerdSettings(c.ann)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.wantCodes, s.codes); diff != "" || s.attempts != c.wantAttempts {
				t.Errorf("codes (-want +got): %s; attempts %d, want %d", diff, s.attempts, c.wantAttempts)
			}
			u := s.upstream("n", []string{"h"})
			wantDeadline := string(ptr.Deref(dPtr(c.wantRequest), v1alpha1.DefaultDeadline))
			if string(*u.Deadline) != wantDeadline {
				t.Errorf("deadline %s; want %s", *u.Deadline, wantDeadline)
			}
			if got := string(ptr.Deref(u.PerTryTimeout, "")); got != c.wantBackend {
				t.Errorf("perTryTimeout %q; want %q", got, c.wantBackend)
			}
		})
	}
}

func dPtr(s string) *v1alpha1.Duration {
	if s == "" {
		return nil
	}
	d := v1alpha1.Duration(s)
	return &d
}

// TestBackendTrafficPolicyBecomesTheServiceBudget: retryConstraint maps to
// the budget; an interval other than the sidecar's window is refused.
func TestBackendTrafficPolicyBecomesTheServiceBudget(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		want       *v1alpha1.Budget
		wantErr    string
	}{
		{"percent and a minimum rate per second", `{targetRefs: [{group: "", kind: Service, name: payments}], retryConstraint: {budget: {percent: 10, interval: 10s}, minRetryRate: {count: 25, interval: 10s}}}`,
			&v1alpha1.Budget{RetryPercent: ptr.To[int32](10), MinRetriesPerSecond: ptr.To[int32](3)}, ""},
		{"an interval other than 10s", `{targetRefs: [{group: "", kind: Service, name: payments}], retryConstraint: {budget: {percent: 10, interval: 1m}}}`,
			nil, `XBackendTrafficPolicy shop/b: spec.retryConstraint.budget.interval: Invalid value: "1m": must be 10s, the sidecar's budget window`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p gwxv1a1.XBackendTrafficPolicy
			if err := yaml.UnmarshalStrict([]byte("metadata: {name: b, namespace: shop}\nspec: "+c.spec), &p); err != nil {
				t.Fatal(err)
			}
			b := Budgets{}
			err := b.Add(&p)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("error %v; want %s", err, c.wantErr)
				}
				return
			}
			if diff := cmp.Diff(Budgets{{Namespace: "shop", Name: "payments"}: c.want}, b); diff != "" || err != nil {
				t.Errorf("budgets (-want +got): %s (err %v)", diff, err)
			}
		})
	}
}

// TestTranslateGRPCMapsMethodsAndLinkerdStatuses: a GRPCRoute's method
// matches become path matches on /service/method, the Exact ones naming a
// service also gRPC patterns of replayableMethods; retry.linkerd.io/grpc's
// names become canonical gRPC statuses.
func TestTranslateGRPCMapsMethodsAndLinkerdStatuses(t *testing.T) {
	var route gwv1.GRPCRoute
	doc := `
metadata: {name: g, namespace: shop, annotations: {retry.linkerd.io/grpc: "unavailable, resource-exhausted", retry.linkerd.io/limit: "3"}}
spec:
  parentRefs: [{group: "", kind: Service, name: payments}]
  rules:
  - matches:
    - method: {service: shop.v1.Payments, method: Get}
    - method: {service: shop.v1.Catalogue}
    - method: {method: List}
    - method: {type: RegularExpression, service: "shop\\.v1\\..*"}
      headers: [{name: x-tenant, value: a}]
`
	if err := yaml.UnmarshalStrict([]byte(doc), &route); err != nil {
		t.Fatal(err)
	}
	rules, err := TranslateGRPC(&route, "shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	u := rules[0].Upstream
	want := []RouteMatch{
		{PathType: "Exact", Path: "/shop.v1.Payments/Get"},
		{PathType: "PathPrefix", Path: "/shop.v1.Catalogue"},
		{PathType: "RegularExpression", Path: "/[^/]+/List"},
		{PathType: "RegularExpression", Path: `/(?:shop\.v1\..*)/(?:[^/]+)`, Headers: []ValueMatch{{Type: "Exact", Name: "x-tenant", Value: "a"}}},
	}
	if diff := cmp.Diff(want, rules[0].Route.Matches); diff != "" {
		t.Errorf("matches (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"GET", "HEAD", "OPTIONS", "/shop.v1.Payments/Get", "/shop.v1.Catalogue/*"}, u.ReplayableMethods); diff != "" {
		t.Errorf("replayableMethods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1alpha1.GRPCStatusCode{"UNAVAILABLE", "RESOURCE_EXHAUSTED"}, u.RetryOn.GRPCStatusCodes); diff != "" || *u.MaxAttempts != 4 || len(u.RetryOn.StatusCodes) != 0 {
		t.Errorf("grpcStatusCodes (-want +got): %s; maxAttempts %d, statusCodes %v", diff, *u.MaxAttempts, u.RetryOn.StatusCodes)
	}
	if rules[0].Route.Kind != "GRPCRoute" {
		t.Errorf("kind %q", rules[0].Route.Kind)
	}
}

// TestTranslateGRPCRefusesBadAnnotations names the annotation and what is
// allowed.
func TestTranslateGRPCRefusesBadAnnotations(t *testing.T) {
	for _, c := range []struct{ name, ann, want string }{
		{"an unknown status", `{retry.linkerd.io/grpc: "unavailable,flaky"}`,
			`GRPCRoute shop/g: metadata.annotations[retry.linkerd.io/grpc]: "flaky" is not a gRPC status; allowed: cancelled, unknown, invalid-argument, deadline-exceeded,`},
		{"ok is never retried", `{retry.linkerd.io/grpc: "ok"}`, `"ok" is not a gRPC status`},
		{"HTTP retries on a GRPCRoute", `{retry.linkerd.io/http: 5xx}`,
			`GRPCRoute shop/g: metadata.annotations[retry.linkerd.io/http]: a GRPCRoute's retries are retry.linkerd.io/grpc`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var route gwv1.GRPCRoute
			doc := "metadata: {name: g, namespace: shop, annotations: " + c.ann + "}\nspec: {parentRefs: [{group: \"\", kind: Service, name: p}], rules: [{}]}\n"
			if err := yaml.UnmarshalStrict([]byte(doc), &route); err != nil {
				t.Fatal(err)
			}
			_, err := TranslateGRPC(&route, "shop", nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want it to contain %s", err, c.want)
			}
		})
	}
}
