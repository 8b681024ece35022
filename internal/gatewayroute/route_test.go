package gatewayroute

import (
	"net/http"
	"net/url"
	"testing"
)

// TestRouteTableChoosesTheRuleByGatewayAPIPrecedence: every request gets the
// first rule, in Gateway API's precedence, whose matches it meets, whatever
// order the routes and rules were given in.
func TestRouteTableChoosesTheRuleByGatewayAPIPrecedence(t *testing.T) {
	route := func(name string, created int64, rule int, consumer bool, m ...RouteMatch) *Route {
		return &Route{Kind: KindHTTPRoute, Namespace: "shop", Name: name, Rule: rule, Created: created, Consumer: consumer, Matches: m}
	}
	prefix := func(p string) RouteMatch { return RouteMatch{PathType: MatchPathPrefix, Path: p} }
	var table RouteTable[string]
	add := func(hosts []string, r *Route, policy string) {
		t.Helper()
		if err := table.Add(hosts, r, policy); err != nil {
			t.Fatal(err)
		}
	}
	hosts := []string{"payments.shop.svc", "payments"}
	add(hosts, route("catch-all", 10, 0, false), "catch-all")
	add(hosts, route("prefixes", 20, 0, false, prefix("/api")), "api")
	add(hosts, route("prefixes", 20, 1, false, prefix("/api/v2/")), "api-v2")
	add(hosts, route("exact", 30, 0, false, RouteMatch{PathType: MatchExact, Path: "/api/v2/charge"}), "exact")
	add(hosts, route("methods", 40, 0, false, RouteMatch{PathType: MatchPathPrefix, Path: "/api", Method: "POST"}), "post")
	add(hosts, route("headers", 50, 0, false,
		RouteMatch{PathType: MatchPathPrefix, Path: "/api", Method: "POST", Headers: []ValueMatch{{Type: MatchExact, Name: "X-Tenant", Value: "a"}}}), "post-tenant-a")
	add(hosts, route("regex", 5, 0, false, RouteMatch{PathType: MatchRegularExpression, Path: "/v[0-9]+/.*"}), "regex")
	add(hosts, route("query", 60, 0, false,
		RouteMatch{PathType: MatchExact, Path: "/search", QueryParams: []ValueMatch{{Type: MatchRegularExpression, Name: "q", Value: "[a-z]+"}}}), "search")
	add([]string{"payments.shop.svc:8080"}, route("port", 70, 0, false, prefix("/api")), "port-8080")
	add([]string{"orders"}, route("older", 1, 0, false, prefix("/")), "older")
	add([]string{"orders"}, route("newer", 2, 0, false, prefix("/")), "newer")
	table.Sort()

	for _, c := range []struct {
		name, authority, method, target, header string
		want                                    string
	}{
		{"an exact path wins over every prefix", "payments.shop.svc", "GET", "/api/v2/charge", "", "exact"},
		{"the longer prefix wins", "payments.shop.svc", "GET", "/api/v2/refund", "", "api-v2"},
		{"a prefix matches whole segments only", "payments.shop.svc", "GET", "/apiary", "", "catch-all"},
		{"a prefix matches itself", "payments.shop.svc", "GET", "/api", "", "api"},
		{"of equal prefixes, the one with a method wins", "payments.shop.svc", "POST", "/api/x", "", "post"},
		{"of equal prefixes and methods, more headers win", "payments.shop.svc", "POST", "/api/x", "a", "post-tenant-a"},
		{"a header of another value does not match", "payments.shop.svc", "POST", "/api/x", "b", "post"},
		{"a regular expression comes after every prefix", "payments.shop.svc", "GET", "/v1/x", "", "catch-all"},
		{"a query parameter regular expression must match the whole value", "payments.shop.svc", "GET", "/search?q=abc", "", "search"},
		{"a query parameter that does not match falls through", "payments.shop.svc", "GET", "/search?q=ABC", "", "catch-all"},
		{"the short name is a host of its own", "payments", "GET", "/api/v2/charge", "", "exact"},
		{"a route on a port is ahead of an equal route for every port, by age", "payments.shop.svc:8080", "GET", "/api/x", "", "api"},
		{"a route on a port applies to that port", "payments.shop.svc:8080", "GET", "/api/v2/", "", "api-v2"},
		{"of equal matches, the older route wins", "orders", "GET", "/", "", "older"},
		{"a host is matched without case and trailing dot", "PAYMENTS.shop.svc.", "GET", "/api/v2/charge", "", "exact"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(c.target)
			if err != nil {
				t.Fatal(err)
			}
			r := &http.Request{Method: c.method, URL: u, Header: http.Header{}}
			if c.header != "" {
				r.Header.Set("X-Tenant", c.header)
			}
			got, _, ok := table.Match(c.authority, r)
			if !ok || got != c.want {
				t.Errorf("Match(%s %s %s) = %q, %v; want %q", c.authority, c.method, c.target, got, ok, c.want)
			}
		})
	}
}

// TestRouteTableMatchesNothingElsewhere: a route's regular expression must
// match the whole path; a host without a route matches nothing.
func TestRouteTableMatchesNothingElsewhere(t *testing.T) {
	var table RouteTable[string]
	if err := table.Add([]string{"a"}, &Route{Matches: []RouteMatch{{PathType: MatchRegularExpression, Path: "/v[0-9]"}}}, "v"); err != nil {
		t.Fatal(err)
	}
	table.Sort()
	for _, c := range []struct{ name, authority, path string }{
		{"a path longer than the expression does not match", "a", "/v1/x"},
		{"a path with a prefix does not match", "a", "/x/v1"},
		{"another host has no route", "b", "/v1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &http.Request{Method: "GET", URL: &url.URL{Path: c.path}, Header: http.Header{}}
			if got, _, ok := table.Match(c.authority, r); ok {
				t.Errorf("Match(%s %s) = %q; want no match", c.authority, c.path, got)
			}
		})
	}
}

// TestConsumerRoutesReplaceProducerRoutes: where a consumer route applies to
// a host, the producer routes do not (GAMMA), even a more specific one.
func TestConsumerRoutesReplaceProducerRoutes(t *testing.T) {
	var table RouteTable[string]
	hosts := []string{"payments.shop"}
	_ = table.Add(hosts, &Route{Name: "producer", Matches: []RouteMatch{{PathType: MatchExact, Path: "/charge"}}}, "producer")
	_ = table.Add(hosts, &Route{Name: "consumer", Consumer: true}, "consumer")
	table.Sort()
	r := &http.Request{Method: "GET", URL: &url.URL{Path: "/charge"}, Header: http.Header{}}
	if got, _, _ := table.Match("payments.shop", r); got != "consumer" {
		t.Errorf("Match = %q; want consumer", got)
	}
}
