//go:build linux

package main_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Gateway API's own conformance tests for HTTPRoute retry and timeouts
// (HTTPRouteRetry, HTTPRouteTimeoutRequest, HTTPRouteTimeoutBackendRequest
// of sigs.k8s.io/gateway-api/conformance v1.6) are written for Gateways. These
// are they adapted to a Service parent: the same routes (parentRefs a Service
// instead of a Gateway, no backendRefs: the sidecar sends where the app
// sent), the same requests and the same expected statuses, through the real
// binary (docs/gateway-api.md#conformance).

// conformanceRoutes are the three conformance manifests with a Service parent.
func conformanceRoutes(port string) string {
	route := func(name, rules string) string {
		return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{group: "", kind: Service, name: infra-backend-v1, port: %s}]
  rules:
%s---
`, name, port, rules)
	}
	return route("retries", `  - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]
    retry: {codes: [500], attempts: 3}
  - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]
    retry: {codes: [500, 502, 503, 504], attempts: 2}
`) + route("request-timeout", `  - matches: [{path: {type: PathPrefix, value: /request-timeout}}]
    timeouts: {request: 500ms}
  - matches: [{path: {type: PathPrefix, value: /disable-request-timeout}}]
    timeouts: {request: "0s"}
`) + route("backend-request-timeout", `  - matches: [{path: {type: PathPrefix, value: /backend-timeout}}]
    timeouts: {backendRequest: 500ms}
  - matches: [{path: {type: PathPrefix, value: /disable-backend-timeout}}]
    timeouts: {backendRequest: "0s"}
`)
}

// conformanceBackend answers as the conformance suite's echo backend does
// for these tests: ?delay=D waits D first; ?responseCode=C&succeedAfter=N
// answers C to the first N arrivals of the same request (by its id
// parameter) and 200 after.
func conformanceBackend(t *testing.T) *upstream {
	var mu sync.Mutex
	seen := map[string]int{}
	return newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if d, err := time.ParseDuration(q.Get("delay")); err == nil {
			time.Sleep(d)
		}
		mu.Lock()
		seen[q.Get("id")]++
		n := seen[q.Get("id")]
		mu.Unlock()
		code, _ := strconv.Atoi(q.Get("responseCode"))
		after, _ := strconv.Atoi(q.Get("succeedAfter"))
		if code != 0 && n <= after {
			w.WriteHeader(code)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

func TestGatewayAPIConformanceOnServiceParents(t *testing.T) {
	up := conformanceBackend(t)
	_, port, _ := strings.Cut(up.host(), ":")
	file := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, file, conformanceRoutes(port))
	host := "infra-backend-v1.gateway-conformance-infra"
	s := startSidecarIn(t, resolvingIn(t, host), []string{"POD_NAMESPACE=gateway-conformance-infra"}, "--policy-file="+file)
	retry := func(path, code, after string) string {
		return fmt.Sprintf("%s?responseCode=%s&succeedAfter=%s", path, code, after)
	}
	const r3, r2 = "/retry/code-500-attempts-3", "/retry/code-all-attempts-2"
	for _, c := range []struct {
		test, name, target string
		want               int
	}{
		{"HTTPRouteRetry", "succeeds after 2 retries when retry is configured for status code 500 and max attempts is 3", retry(r3, "500", "2"), 200},
		{"HTTPRouteRetry", "fails when required retries on 500 exceed max attempts (3)", retry(r3, "500", "4"), 500},
		{"HTTPRouteRetry", "does not retry on 503 when retry is only configured for status code 500", retry(r3, "503", "2"), 503},
		{"HTTPRouteRetry", "succeeds after 1 retry on 500 when retry is configured for all status code and max attempts is 2", retry(r2, "500", "1"), 200},
		{"HTTPRouteRetry", "fails when required retries on 500 exceed max attempts (2)", retry(r2, "500", "3"), 500},
		{"HTTPRouteRetry", "succeeds after 1 retry on 502 when retry is configured for all status code and max attempts is 2", retry(r2, "502", "1"), 200},
		{"HTTPRouteRetry", "fails when required retries on 502 exceed max attempts", retry(r2, "502", "3"), 502},
		{"HTTPRouteRetry", "succeeds after 1 retry on 503 when retry is configured for all status code and max attempts is 2", retry(r2, "503", "1"), 200},
		{"HTTPRouteRetry", "fails when required retries on 503 exceed max attempts", retry(r2, "503", "3"), 503},
		{"HTTPRouteRetry", "succeeds after 1 retry on 504 when retry is configured for all status code and max attempts is 2", retry(r2, "504", "1"), 200},
		{"HTTPRouteRetry", "fails when required retries on 504 exceed max attempts", retry(r2, "504", "3"), 504},
		{"HTTPRouteTimeoutRequest", "a request within the timeout succeeds", "/request-timeout", 200},
		{"HTTPRouteTimeoutRequest", "a request past the 500ms timeout gets 504", "/request-timeout?delay=1s", 504},
		{"HTTPRouteTimeoutRequest", "a 0s timeout disables it", "/disable-request-timeout?delay=1s", 200},
		{"HTTPRouteTimeoutBackendRequest", "an attempt within the timeout succeeds", "/backend-timeout", 200},
		{"HTTPRouteTimeoutBackendRequest", "an attempt past the 500ms timeout gets 504", "/backend-timeout?delay=1s", 504},
		{"HTTPRouteTimeoutBackendRequest", "a 0s timeout disables it", "/disable-backend-timeout?delay=1s", 200},
	} {
		t.Run(c.test+"/"+c.name, func(t *testing.T) {
			sep := "?"
			if strings.Contains(c.target, "?") {
				sep = "&"
			}
			id := strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(c.name)
			r := s.get(fmt.Sprintf("http://%s:%s%s%sid=%s", host, port, c.target, sep, id))
			if r.status != c.want {
				t.Errorf("got %d (outcome %q, %s attempts); want %d", r.status, r.header.Get("X-Retry-Outcome"), r.header.Get("X-Retry-Attempts"), c.want)
			}
		})
	}
}
