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
	var mu sync.Mutex
	var traceparents []string
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("Traceparent"))
		first := len(traceparents) == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})}
	go up.Serve(n.listenInside(apiAddr + ":80"))
	t.Cleanup(func() { up.Close() })

	recv := otlpreceiver.New()
	collectorSrv := &http.Server{Handler: recv}
	collectorLn := n.listenInside("127.0.0.1:4318")
	go collectorSrv.Serve(collectorLn)
	t.Cleanup(func() { collectorSrv.Close() })

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
	env := append(baseEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+collectorLn.Addr().String(), "OTEL_BSP_SCHEDULE_DELAY=20")
	n.background(n.command(t.Context(), env, "setpriv", "--reuid="+id, "--regid="+id, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--", n.bin,
		fmt.Sprintf("--listen=127.0.0.1:%d", v1alpha1.ProxyPort),
		fmt.Sprintf("--admin-listen=127.0.0.1:%d", v1alpha1.AdminPort),
		fmt.Sprintf("--transparent-listen=127.0.0.1:%d", v1alpha1.TransparentPort),
		"--policy-file="+policy, "--ready-file="+ready, "--drain-timeout=1s"), ready)
	n.must(n.bin, injectedRedirectArgs(t)...)

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
	mu.Lock()
	defer mu.Unlock()
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
