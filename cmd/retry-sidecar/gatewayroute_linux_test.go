//go:build linux

package main_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
)

// The tests in this file give the real binary Gateway API routes in its
// --policy-file and call Service names through it. Each sidecar runs in a
// private mount namespace of its own whose /etc/hosts resolves the names to
// 127.0.0.1 (resolvingIn), so the calls stay on loopback. They need root
// (unshare, mount) and skip otherwise.

// resolvingIn is a command prefix that runs a program in a private mount
// namespace where every name resolves to 127.0.0.1.
func resolvingIn(t *testing.T, names ...string) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the sidecar in a private mount namespace (unshare -m) with its own /etc/hosts")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hosts, "127.0.0.1 localhost "+strings.Join(names, " ")+"\n")
	return []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /etc/hosts && exec "$@"`, hosts}
}

// scriptedByPath is an upstream whose answer depends on the path:
// /fail-N/... answers 503 to its first N arrivals and 200 after,
// /slow-first/... sleeps 1 s on its first arrival, and anything else 503.
func scriptedByPath(t *testing.T) *upstream {
	seen := map[string]int{}
	var mu = make(chan struct{}, 1)
	return newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu <- struct{}{}
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		<-mu
		first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if first == "api" || first == "slow" { // /api/fail-2, /slow/fail-0: the second segment says
			_, first, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"+first+"/"), "")
			first, _, _ = strings.Cut(first, "/")
		}
		switch {
		case first == "slow-first":
			if n == 1 {
				time.Sleep(time.Second)
			}
			w.WriteHeader(http.StatusOK)
		case strings.HasPrefix(first, "fail-"):
			k, _ := strconv.Atoi(strings.TrimPrefix(first, "fail-"))
			if n <= k {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
}

// routesYAML are the documents of the tests' --policy-file: a producer
// route for payments, a consumer route of namespace checkout for it, a
// route for orders that a RetryPolicy overrides, and a budget for ledger.
func routesYAML(port string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: payments-retries, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: payments, port: %[1]s}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    retry: {codes: [503], attempts: 2, backoff: 200ms}
    timeouts: {request: 5s}
  - matches: [{path: {type: Exact, value: /api/fail-1/once}}]
    timeouts: {request: 5s}
  - matches: [{path: {type: PathPrefix, value: /slow}}]
    retry: {codes: [503], attempts: 2, backoff: 10ms}
    timeouts: {request: 3s, backendRequest: 300ms}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: checkout-view, namespace: checkout}
spec:
  parentRefs: [{group: "", kind: Service, name: payments, namespace: shop}]
  rules:
  - retry: {codes: [503], attempts: 1, backoff: 10ms}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orders-retries, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: orders}]
  rules: [{retry: {codes: [503], attempts: 5, backoff: 10ms}}]
---
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: orders, namespace: shop}
spec:
  upstreams:
  - name: orders
    hosts: ["orders.shop:%[1]s"]
    maxAttempts: 2
    backoff: {base: 10ms, max: 10ms}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ledger-retries, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: ledger}]
  rules: [{retry: {codes: [503], attempts: 2, backoff: 1ms}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: ledger-budget, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: ledger}]
  retryConstraint:
    budget: {percent: 0, interval: 10s}
    minRetryRate: {count: 1, interval: 1s}
`, port)
}

var routeHosts = []string{"payments", "payments.shop", "payments.shop.svc", "payments.shop.svc.cluster.local", "orders.shop", "ledger.shop"}

// TestRoutesInPolicyFilesRetryAsTheirRulesSay: every rule of a route is
// enforced for the requests it matches, by the real binary.
func TestRoutesInPolicyFilesRetryAsTheirRulesSay(t *testing.T) {
	up := scriptedByPath(t)
	_, port, _ := strings.Cut(up.host(), ":")
	file := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, file, routesYAML(port))
	shop := startSidecarIn(t, resolvingIn(t, routeHosts...), []string{"POD_NAMESPACE=shop"}, "--policy-file="+file)
	checkout := startSidecarIn(t, resolvingIn(t, routeHosts...), []string{"POD_NAMESPACE=checkout"}, "--policy-file="+file)
	for _, c := range []struct {
		name         string
		from         *sidecar
		method, url  string
		wantStatus   int
		wantOutcome  string
		wantArrivals int
		wantMinWait  time.Duration // between the first two arrivals
	}{
		{"a matching rule retries its codes with its backoff as the minimum wait", shop, "GET", "http://payments.shop.svc.cluster.local:%s/api/fail-2/a", 200, "success", 3, 200 * time.Millisecond},
		{"the short name applies to callers in the Service's namespace", shop, "GET", "http://payments:%s/api/fail-1/b", 200, "success", 2, 200 * time.Millisecond},
		{"an exact rule without retry wins over the prefix", shop, "GET", "http://payments.shop:%s/api/fail-1/once", 503, "not-retryable", 1, 0},
		{"a POST without an idempotency key is sent once whatever the route says", shop, "POST", "http://payments.shop:%s/api/fail-1/c", 503, "not-replayable", 1, 0},
		{"backendRequest cuts a slow attempt, which is retried", shop, "GET", "http://payments.shop:%s/slow/slow-first/d", 200, "success", 2, 300 * time.Millisecond},
		{"a path no rule matches passes through", shop, "GET", "http://payments.shop:%s/other/fail-1", 503, "", 1, 0},
		{"a consumer route replaces the producer route in its namespace", checkout, "GET", "http://payments.shop.svc:%s/api/fail-2/e", 503, "exhausted", 2, 0},
		{"a RetryPolicy upstream for the same host wins over the route", shop, "GET", "http://orders.shop:%s/fail-3/f", 503, "exhausted", 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := fmt.Sprintf(c.url, port)
			req, err := http.NewRequest(c.method, url, strings.NewReader(""))
			if err != nil {
				t.Fatal(err)
			}
			r := c.from.do(req)
			path := req.URL.Path
			var at []time.Time
			for _, a := range up.got() {
				if a.path == path {
					at = append(at, a.at)
				}
			}
			if r.status != c.wantStatus || r.header.Get("X-Retry-Outcome") != c.wantOutcome || len(at) != c.wantArrivals {
				t.Fatalf("got %d, outcome %q, %d arrivals; want %d, %q, %d", r.status, r.header.Get("X-Retry-Outcome"), len(at),
					c.wantStatus, c.wantOutcome, c.wantArrivals)
			}
			if c.wantMinWait > 0 && at[1].Sub(at[0]) < c.wantMinWait {
				t.Errorf("second arrival %v after the first; want at least %v", at[1].Sub(at[0]), c.wantMinWait)
			}
		})
	}
}

// TestBackendTrafficPolicyBudgetBoundsRouteRetries: an XBackendTrafficPolicy
// with percent 0 and a floor of 1 retry a second allows the retries of the
// floor over the 10 s window, shared by every caller of the Service.
func TestBackendTrafficPolicyBudgetBoundsRouteRetries(t *testing.T) {
	up := scriptedByPath(t)
	_, port, _ := strings.Cut(up.host(), ":")
	file := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, file, routesYAML(port))
	s := startSidecarIn(t, resolvingIn(t, routeHosts...), []string{"POD_NAMESPACE=shop"}, "--policy-file="+file)
	outcomes := map[string]int{}
	for i := range 15 {
		r := s.get(fmt.Sprintf("http://ledger.shop:%s/always-503/%d", port, i))
		outcomes[r.header.Get("X-Retry-Outcome")]++
	}
	want := map[string]int{"exhausted": 5, "budget-exhausted": 10}
	if got := len(up.got()); got != 15+10 || !maps.Equal(outcomes, want) {
		t.Errorf("%d arrivals for 15 requests, outcomes %v; want 25 (15 first attempts and the 10 retries of 1 a second over the 10 s window), outcomes %v",
			got, outcomes, want)
	}
}

// grpcRouteYAML is a GRPCRoute with Linkerd's gRPC retry annotations: every
// method of shop.v1.Catalogue may be resent, methods matched by a regular
// expression name no method that may.
func grpcRouteYAML(port string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: grpc-retries
  namespace: shop
  annotations: {retry.linkerd.io/grpc: "unavailable,resource-exhausted", retry.linkerd.io/limit: "2"}
spec:
  parentRefs: [{group: "", kind: Service, name: grpc-payments, port: %s}]
  rules:
  - matches: [{method: {service: shop.v1.Catalogue}}]
  - matches: [{method: {type: RegularExpression, service: shop.v1.Payments, method: "Charge.*"}}]
`, port)
}

// TestGRPCRoutesWithLinkerdAnnotationsRetryGRPCCalls: a GRPCRoute's
// retry.linkerd.io/grpc gives the gRPC retries of docs/grpc.md to the
// methods its rules name, through the real binary with a grpc-go client and
// server.
func TestGRPCRoutesWithLinkerdAnnotationsRetryGRPCCalls(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	addr := grpctest.Serve(t, func(_ any, st grpc.ServerStream) error {
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		method, _ := grpc.MethodFromServerStream(st)
		mu.Lock()
		seen[method]++
		n := seen[method]
		mu.Unlock()
		if failures, _ := strconv.Atoi(string(m)); n <= failures {
			return grpcstatus.Error(codes.Unavailable, "not yet")
		}
		return st.SendMsg(&m)
	})
	_, port, _ := strings.Cut(addr, ":")
	file := filepath.Join(t.TempDir(), "routes.yaml")
	writeFile(t, file, grpcRouteYAML(port))
	s := startSidecarIn(t, resolvingIn(t, "grpc-payments.shop"), []string{"POD_NAMESPACE=shop"}, "--policy-file="+file)
	cc := grpctest.Client(t, "grpc-payments.shop:"+port, grpctest.DialTo(s.proxy))
	for _, c := range []struct {
		name, method string
		failures     string // the message: how many calls of the method fail first
		want         codes.Code
		wantOutcome  string
		wantArrivals int
	}{
		{"a method of the named service is retried on a listed status", "/shop.v1.Catalogue/List", "2", codes.OK, "success", 3},
		{"the limit of 2 retries makes 3 attempts", "/shop.v1.Catalogue/Get", "3", codes.Unavailable, "exhausted", 3},
		{"a method matched by a regular expression is not replayable", "/shop.v1.Payments/ChargeCard", "1", codes.Unavailable, "not-replayable", 1},
		{"a method no rule matches passes through", "/shop.v1.Ledger/Get", "1", codes.Unavailable, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m, out := []byte(c.failures), []byte(nil)
			var tr metadata.MD
			err := cc.Invoke(ctx, c.method, &m, &out, grpc.Trailer(&tr))
			mu.Lock()
			arrivals := seen[c.method]
			mu.Unlock()
			if grpcstatus.Code(err) != c.want || first(tr["x-retry-outcome"]) != c.wantOutcome || arrivals != c.wantArrivals {
				t.Errorf("got %v, outcome %q, %d arrivals; want %v, %q, %d", grpcstatus.Code(err), first(tr["x-retry-outcome"]), arrivals,
					c.want, c.wantOutcome, c.wantArrivals)
			}
		})
	}
}
