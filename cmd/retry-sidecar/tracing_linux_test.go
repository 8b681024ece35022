package main_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
)

// TestTransparentInterceptionIsTraced: an app that knows nothing of the
// sidecar, its connection to port 80 redirected to the transparent listener,
// gets the same trace as through the forward proxy: its traceparent the
// parent of one SERVER span, one CLIENT span per attempt, each attempt's
// context what the upstream received (docs/observability.md#tracing).
func TestTransparentInterceptionIsTraced(t *testing.T) {
	n := newNetns(t)
	up := serveFailOnceRecordingTraceparents(n)
	recv := otlpreceiver.New()
	collectorSrv := &http.Server{Handler: recv}
	collectorLn := n.listenInside("127.0.0.1:4318")
	go collectorSrv.Serve(collectorLn)
	t.Cleanup(func() { collectorSrv.Close() })
	startTracedInterceptingSidecar(t, n, collectorLn.Addr().String())

	resp := getOrdersWithTraceparent(t, n)
	if resp.StatusCode != 200 || resp.Header.Get("X-Retry-Outcome") != "success" {
		t.Fatalf("app got %d, outcome %q; want 200 success", resp.StatusCode, resp.Header.Get("X-Retry-Outcome"))
	}

	col := &collector{Receiver: recv}
	spans := col.waitSpans(t, 3)
	t.Logf("the collector received:\n%s", otlpreceiver.Tree(spans))
	var server otlpreceiver.Span
	var clients []otlpreceiver.Span
	for _, s := range spans {
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case tracepb.Span_SPAN_KIND_CLIENT:
			clients = append(clients, s)
		}
	}
	if server.Span == nil || len(clients) != 2 || len(spans) != 3 {
		t.Fatalf("%d spans, want 1 SERVER and 2 CLIENT", len(spans))
	}
	if got := hex.EncodeToString(server.GetParentSpanId()); got != appSpanID {
		t.Errorf("SERVER span's parent %s, want the app's %s", got, appSpanID)
	}
	wantAttrs(t, "SERVER", server.Span, map[string]string{"retry.upstream": "api", "retry.outcome": "success", "retry.attempts": "2"})
	traceparents := up.received()
	for i, c := range clients {
		want := "00-" + appTraceID + "-" + hex.EncodeToString(c.GetSpanId()) + "-01"
		found := false
		for _, tp := range traceparents {
			found = found || tp == want
		}
		if !found {
			t.Errorf("CLIENT span %d (%s) is not a traceparent the upstream received: %q", i, want, traceparents)
		}
	}
}

// traceparentUpstream is the app's upstream at apiAddr:80 inside a netns: it
// answers 503 to the first request and "ok" after, and keeps the
// Traceparent of each.
type traceparentUpstream struct {
	mu           sync.Mutex
	traceparents []string
}

func serveFailOnceRecordingTraceparents(n *netns) *traceparentUpstream {
	u := &traceparentUpstream{}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.traceparents = append(u.traceparents, r.Header.Get("Traceparent"))
		first := len(u.traceparents) == 1
		u.mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})}
	go up.Serve(n.listenInside(apiAddr + ":80"))
	n.t.Cleanup(func() { up.Close() })
	return u
}

// received is the Traceparent of every request so far, in order.
func (u *traceparentUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.traceparents)
}

// startTracedInterceptingSidecar starts the sidecar in n as its injected
// UID, with a policy of 3 attempts for apiHost and spans exported to the
// OTLP/HTTP collector at collectorAddr, and redirects the app's port 80 to
// its transparent listener.
func startTracedInterceptingSidecar(t *testing.T, n *netns, collectorAddr string) {
	t.Helper()
	policy := filepath.Join(n.dir, "policy.yaml")
	must(t, os.WriteFile(policy, []byte(fmt.Sprintf(`apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: api}
spec:
  upstreams:
  - name: api
    hosts: [%q]
    maxAttempts: 3
    backoff: {base: 10ms, max: 50ms, jitter: None}
`, apiHost)), 0o644))
	ready := filepath.Join(n.dir, "run", "sidecar.ready")
	id := strconv.Itoa(sidecarUID)
	env := append(baseEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+collectorAddr, "OTEL_BSP_SCHEDULE_DELAY=20")
	n.background(n.command(t.Context(), env, "setpriv", "--reuid="+id, "--regid="+id, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--", n.bin,
		fmt.Sprintf("--listen=127.0.0.1:%d", v1alpha1.ProxyPort),
		fmt.Sprintf("--admin-listen=127.0.0.1:%d", v1alpha1.AdminPort),
		fmt.Sprintf("--transparent-listen=127.0.0.1:%d", v1alpha1.TransparentPort),
		"--policy-file="+policy, "--ready-file="+ready, "--drain-timeout=1s"), ready)
	n.must(n.bin, injectedRedirectArgs(t)...)
}

// getOrdersWithTraceparent is the app's GET /orders to apiAddr:80 from
// inside n, in the app's trace; it returns the response with its body read.
func getOrdersWithTraceparent(t *testing.T, n *netns) *http.Response {
	t.Helper()
	var resp *http.Response
	must(t, n.inside(func() error {
		c, err := net.DialTimeout("tcp", apiAddr+":80", 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET /orders HTTP/1.1\r\nHost: "+apiHost+"\r\nTraceparent: "+appTraceparent+"\r\nConnection: close\r\n\r\n")
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			return err
		}
		_, err = io.ReadAll(resp.Body)
		return err
	}))
	return resp
}
