//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// grpcCase is one call of the gRPC case: the upstream's script and what the
// app and the upstream must see.
type grpcCase struct {
	name, method, steps string
	code, outcome       string
	arrivals            int
	// minGap is the least time between the first two arrivals (a pushback);
	// maxElapsed bounds the call as the app saw it (0: no bound).
	minGap, maxElapsed time.Duration
}

var grpcCases = []grpcCase{
	{name: "UNAVAILABLE Trailers-Only, then UNAVAILABLE after headers, then OK: retried twice and OK",
		method: "/e2e.Flaky/Get", steps: "UNAVAILABLE,UNAVAILABLE after-headers,OK", code: "OK", outcome: "success", arrivals: 3},
	{name: "RESOURCE_EXHAUSTED with a 1000 ms pushback: the second arrival no earlier than 1 s after the first",
		method: "/e2e.Flaky/Get", steps: "RESOURCE_EXHAUSTED pushback=1000,OK", code: "OK", outcome: "success", arrivals: 2, minGap: time.Second},
	{name: "a method not in replayableMethods is sent once",
		method: "/e2e.Flaky/Put", steps: "UNAVAILABLE", code: "Unavailable", outcome: "not-replayable", arrivals: 1},
	{name: "an outage stops after maxAttempts (4) transmissions",
		method: "/e2e.Flaky/Get", steps: "UNAVAILABLE", code: "Unavailable", outcome: "exhausted", arrivals: 4},
	{name: "a pushback of 60 s, longer than retryAfter.maxWait, comes back at once as deferred",
		method: "/e2e.Flaky/Get", steps: "UNAVAILABLE pushback=60000", code: "Unavailable", outcome: "deferred", arrivals: 1, maxElapsed: 2 * time.Second},
}

// grpcRetried deploys an app whose gRPC client has no proxy settings, in
// transparent interception of port 9090, and checks each call of grpcCases
// against the upstream's count of arrivals.
func (s *suite) grpcRetried(t *testing.T) {
	app := s.deployGRPCApp(t)
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{"retry-redirect", "retry-sidecar"} {
				out, err := s.kubectlRun(nil, "logs", "-n", s.ns, "-l", "app=grpc-app", "-c", c, "--tail=100")
				t.Logf("----- grpc-app's %s logs (err %v):\n%s", c, err, out)
			}
		}
	})
	for _, c := range grpcCases {
		t.Run(c.name, func(t *testing.T) {
			r := app.grpcCall(t, s.upstream+":9090", c.method, c.steps)
			t.Logf("%s %q: %s, %s, x-retry-attempts %s, in %d ms; %d arrivals at the upstream", c.method, c.steps, r.Code,
				r.Trailers["x-retry-outcome"], r.Trailers["x-retry-attempts"], r.ElapsedMillis, len(r.Arrivals))
			if r.Code != c.code || r.Trailers["x-retry-outcome"] != c.outcome || len(r.Arrivals) != c.arrivals ||
				r.Trailers["x-retry-attempts"] != strconv.Itoa(c.arrivals) {
				t.Fatalf("got %s, x-retry-outcome %q, x-retry-attempts %q, %d arrivals; want %s, %q, %d and %d (report %+v)",
					r.Code, r.Trailers["x-retry-outcome"], r.Trailers["x-retry-attempts"], len(r.Arrivals), c.code, c.outcome, c.arrivals, c.arrivals, r)
			}
			if c.minGap > 0 {
				gap := r.Arrivals[1].At.Sub(r.Arrivals[0].At)
				t.Logf("the second arrival came %s after the first", gap.Round(time.Millisecond))
				if gap < c.minGap {
					t.Errorf("second arrival %s after the first, want at least %s", gap, c.minGap)
				}
			}
			if c.maxElapsed > 0 && time.Duration(r.ElapsedMillis)*time.Millisecond > c.maxElapsed {
				t.Errorf("the call took %d ms, want at most %s", r.ElapsedMillis, c.maxElapsed)
			}
			if c.outcome == "deferred" && r.Trailers["x-retry-not-before"] == "" {
				t.Errorf("a deferred call without x-retry-not-before: %v", r.Trailers)
			}
		})
	}
}

// deployGRPCApp applies the gRPC policy and testdata/grpc-app.yaml, checks
// the pod got transparent interception (the redirect init container, no proxy
// environment) and waits until its sidecar has the policy.
func (s *suite) deployGRPCApp(t *testing.T) podDirect {
	t.Helper()
	ctx := context.Background()
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "flaky-upstream"}, &svc); err != nil {
		t.Fatal(err)
	}
	s.applyTemplate(t, "grpc-policy.yaml", nil)
	s.applyTemplate(t, "grpc-app.yaml", map[string]string{"UPSTREAM_IP": svc.Spec.ClusterIP})
	s.waitDeploymentIn(t, s.ns, "grpc-app")
	pod := s.podOf(t, "grpc-app")
	if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "retry-redirect" }) {
		t.Fatalf("the grpc-app pod has no retry-redirect init container: transparent interception was not applied (annotations %v)", pod.Annotations)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "HTTP_PROXY" || e.Name == "HTTPS_PROXY" {
			t.Fatalf("the grpc-app container has %s: transparent interception must not set the proxy environment", e.Name)
		}
	}
	app := podDirect{ip: pod.Status.PodIP}
	s.eventually(t, time.Minute, "the grpc-app's sidecar to have the gRPC policy", func() (bool, string) {
		c, err := app.config()
		has := slices.ContainsFunc(c.Upstreams, func(u string) bool { return strings.HasSuffix(u, "flaky-upstream-grpc") })
		return err == nil && has, fmt.Sprintf("%+v (%v)", c, err)
	})
	return app
}

// grpcCall is the demo app's /grpc-call, made on the pod's IP.
func (p podDirect) grpcCall(t *testing.T, target, method, steps string) wire.GRPCReport {
	t.Helper()
	q := url.Values{"target": {target}, "method": {method}, "steps": {steps}}
	var r wire.GRPCReport
	b, err := p.get(":8080/grpc-call?" + q.Encode())
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		t.Fatalf("grpc-call %s %s: %v", method, steps, err)
	}
	return r
}
