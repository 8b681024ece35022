package gatewayroute

import (
	"slices"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/internal/rules"
)

// FuzzTranslate: whatever a route says, Translate either refuses it or gives
// rules whose matches all compile into a RouteTable (Validate caught every
// expression the table would refuse), with attempts the sidecar allows.
func FuzzTranslate(f *testing.F) {
	f.Add(producerRoute)
	f.Add(`spec: {parentRefs: [{group: "", kind: Service, name: p}], rules: [{matches: [{path: {type: RegularExpression, value: "/v[0-9]+"}, headers: [{type: RegularExpression, name: x, value: "a|b"}]}]}]}`)
	f.Add(`metadata: {annotations: {retry.linkerd.io/http: "5xx,429", retry.linkerd.io/limit: "3", timeout.linkerd.io/request: 1s}}
spec: {parentRefs: [{group: "", kind: Service, name: p}], rules: [{}]}`)
	f.Add(`spec: {parentRefs: [{group: "", kind: Service, name: p}], rules: [{retry: {codes: [503], attempts: 0}, timeouts: {request: 1s, backendRequest: 0s}}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var route gwv1.HTTPRoute
		if yaml.Unmarshal([]byte(doc), &route) != nil {
			return
		}
		out, err := Translate(&route, "shop", nil)
		if err != nil {
			return
		}
		var table RouteTable[int]
		for i, r := range out {
			if err := table.Add(r.Upstream.Hosts, &out[i].Route, i); err != nil {
				t.Fatalf("Translate accepted a rule the table refuses: %v", err)
			}
			if n := int64(*r.Upstream.MaxAttempts); n < rules.AttemptsRange.Min || n > rules.AttemptsRange.Max {
				t.Fatalf("maxAttempts %d outside %v", n, rules.AttemptsRange)
			}
		}
		table.Sort()
	})
}

// FuzzLinkerdAnnotations: the annotations either are refused or give
// statuses the sidecar retries and attempts within its range.
func FuzzLinkerdAnnotations(f *testing.F) {
	f.Add("5xx", "2", "300ms", "2s")
	f.Add("gateway-error,429,500-504", "0", "", "")
	f.Add("599-100", "-1", "0s", "soon")
	f.Fuzz(func(t *testing.T, codes, limit, timeout, request string) {
		s, err := linkerdSettings(map[string]string{LinkerdRetryHTTP: codes, LinkerdRetryLimit: limit,
			LinkerdRetryTimeout: timeout, LinkerdTimeoutRequest: request})
		if err != nil {
			return
		}
		if int64(s.attempts) < 1 || int64(s.attempts) > rules.AttemptsRange.Max {
			t.Fatalf("attempts %d", s.attempts)
		}
		for _, c := range s.codes {
			if !slices.Contains(rules.RetryableStatuses(), c) {
				t.Fatalf("code %d is not one the sidecar retries", c)
			}
		}
	})
}
