package main_test

import (
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// The app's span: the parent of the sidecar's SERVER span.
const (
	appTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	appSpanID      = "00f067aa0ba902b7"
	appTraceparent = "00-" + appTraceID + "-" + appSpanID + "-01"
)

// collector is an in-process OTLP receiver on 127.0.0.1 speaking protocol
// (http/protobuf or grpc), and the environment that points a sidecar at it.
type collector struct {
	*otlpreceiver.Receiver
	env []string
}

func startCollector(t *testing.T, protocol string, onExport func(context.Context) error) *collector {
	t.Helper()
	recv := otlpreceiver.New()
	recv.OnExport = onExport
	var endpoint string
	switch protocol {
	case "grpc":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		recv.RegisterGRPC(srv)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		endpoint = "http://" + ln.Addr().String()
	default:
		srv := httptest.NewServer(recv)
		t.Cleanup(srv.Close)
		endpoint = srv.URL
	}
	return &collector{Receiver: recv, env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_BSP_SCHEDULE_DELAY=20",
		"OTEL_SERVICE_NAME=checkout-retry-sidecar",
	}}
}

// waitSpans waits (at most 10s) until the collector holds n spans.
func (c *collector) waitSpans(t *testing.T, n int) []otlpreceiver.Span {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spans := c.Wait(ctx, func(s []otlpreceiver.Span) bool { return len(s) >= n })
	if len(spans) < n {
		t.Fatalf("the collector received %d spans, want %d:\n%s", len(spans), n, otlpreceiver.Tree(spans))
	}
	return spans
}

// One request retried twice (503; 503 with Retry-After: 1; 200) is one trace:
// the app's span → 1 SERVER span → 3 CLIENT spans, whose contexts the upstream
// received as traceparent, over either OTLP protocol.
func TestTracingOneTraceOneSpanPerAttempt(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run("exported over "+protocol, func(t *testing.T) {
			t.Parallel()
			col := startCollector(t, protocol, nil)
			up := newUpstream(t, sequence(status(503), status(503, "Retry-After", "1"),
				status(200, "Server", "payments-api/2.1", "Via", "1.1 edge-cdn")))
			s := startSidecarEnv(t, col.env, "--policy-file="+policyFile(t, up.host(), fields("maxAttempts: 3")...))
			req, _ := http.NewRequest(http.MethodGet, up.url("/charge?card=4111"), nil)
			req.Header.Set("Traceparent", appTraceparent)
			req.Header.Set("Authorization", "Bearer secret")
			assertOutcome(t, s.do(req), 200, "success", "3")

			spans := col.waitSpans(t, 4)
			t.Logf("the collector received:\n%s", otlpreceiver.Tree(spans))
			if len(spans) != 4 {
				t.Fatalf("got %d spans, want 4", len(spans))
			}
			server, clients := splitSpans(t, spans)
			if got := hex.EncodeToString(server.GetParentSpanId()); got != appSpanID {
				t.Errorf("SERVER span's parent %s, want the app's span %s", got, appSpanID)
			}
			if server.Service != "checkout-retry-sidecar" {
				t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", server.Service)
			}
			wantAttrs(t, "SERVER", server.Span, map[string]string{"http.request.method": "GET",
				"retry.policy": "default/test", "retry.upstream": "up", "retry.outcome": "success",
				"retry.attempts": "3", "http.response.status_code": "200"})
			waits := eventsNamed(server.Span, "retry.wait")
			if len(waits) != 2 {
				t.Fatalf("%d retry.wait events, want 2", len(waits))
			}
			if r := attrOf(waits[0].GetAttributes(), "retry.reason"); r != "backoff" {
				t.Errorf("first wait's reason %q, want backoff", r)
			}
			if r := attrOf(waits[1].GetAttributes(), "retry.reason"); r != "retry_after" {
				t.Errorf("second wait's reason %q, want retry_after", r)
			}
			if d := doubleOf(waits[1].GetAttributes(), "retry.delay"); d < 1.000 {
				t.Errorf("the Retry-After wait's retry.delay %v, want >= 1.000 s", d)
			}

			arrivals := up.got()
			if len(arrivals) != 3 {
				t.Fatalf("upstream got %d requests, want 3", len(arrivals))
			}
			for i, want := range []struct{ resend, status, errorType string }{
				{"", "503", "503"}, {"1", "503", "503"}, {"2", "200", ""},
			} {
				c := clients[i]
				if !slices.Equal(c.GetParentSpanId(), server.GetSpanId()) {
					t.Errorf("attempt %d's parent is not the SERVER span", i+1)
				}
				wantAttrs(t, "CLIENT", c.Span, map[string]string{"http.request.method": "GET",
					"http.request.resend_count": want.resend, "http.response.status_code": want.status,
					"error.type": want.errorType, "server.address": "127.0.0.1"})
				tp := arrivals[i].header.Get("Traceparent")
				if wantTP := "00-" + appTraceID + "-" + hex.EncodeToString(c.GetSpanId()) + "-01"; tp != wantTP {
					t.Errorf("attempt %d arrived with traceparent %q, want the CLIENT span's %q", i+1, tp, wantTP)
				}
			}
			wantAttrs(t, "the answering attempt", clients[2].Span, map[string]string{
				"http.response.header.server": "[payments-api/2.1]", "http.response.header.via": `["1.1 edge-cdn"]`})
			assertNothingElseRecorded(t, spans)
		})
	}
}

// A request answered by the sidecar itself (the upstream held after a
// deferral) has a SERVER span with its outcome and no CLIENT span.
func TestTracingLocalAnswerHasNoAttemptSpan(t *testing.T) {
	t.Parallel()
	col := startCollector(t, "http/protobuf", nil)
	up := newUpstream(t, status(429, "Retry-After", "3600"))
	s := startSidecarEnv(t, col.env, "--policy-file="+policyFile(t, up.host(), fields("pacing: {holdOnDeferral: true}")...))
	assertOutcome(t, s.get(up.url("/quota")), 429, "deferred", "1")
	col.waitSpans(t, 2)
	req, _ := http.NewRequest(http.MethodGet, up.url("/again"), nil)
	req.Header.Set("Traceparent", appTraceparent)
	localHeld(t, s.do(req))

	spans := col.waitSpans(t, 3)
	var mine []otlpreceiver.Span
	for _, sp := range spans {
		if hex.EncodeToString(sp.GetTraceId()) == appTraceID {
			mine = append(mine, sp)
		}
	}
	t.Logf("the collector received:\n%s", otlpreceiver.Tree(mine))
	if len(mine) != 1 || mine[0].GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("the held request's trace has %d spans, want 1 SERVER span and no CLIENT span", len(mine))
	}
	server := mine[0].Span
	wantAttrs(t, "SERVER", server, map[string]string{"retry.outcome": "deferred", "retry.attempts": "0",
		"http.response.status_code": "429"})
	if nb := attrOf(server.GetAttributes(), "retry.not_before"); nb == "" {
		t.Error("no retry.not_before on the deferred request's span")
	}
	if ev := eventsNamed(server, "retry.local_answer"); len(ev) != 1 || attrOf(ev[0].GetAttributes(), "retry.outcome") != "deferred" {
		t.Errorf("retry.local_answer events %v, want one with retry.outcome deferred", ev)
	}
	if n := len(up.got()); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

// A collector that is slow or down costs requests nothing: the export queue
// is bounded, and what does not fit is dropped and counted.
func TestTracingCollectorDownOrSlowNeverBlocksRequests(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		onExport func(context.Context) error
		down     bool
		reason   string
	}{
		"a collector that never answers fills the queue": {
			onExport: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, reason: "queue_full"},
		"a collector that is down fails every export": {down: true, reason: "export_failed"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			col := startCollector(t, "http/protobuf", tc.onExport)
			env := append(col.env, "OTEL_BSP_MAX_QUEUE_SIZE=4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=2",
				"OTEL_BSP_EXPORT_TIMEOUT=300", "OTEL_EXPORTER_OTLP_TIMEOUT=300")
			if tc.down {
				env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+freePort(t))
			}
			up := newUpstream(t, status(200))
			s := startSidecarEnv(t, env, "--policy-file="+policyFile(t, up.host(), fields()...))
			start := time.Now()
			for range 50 {
				r := s.get(up.url("/x"))
				assertOutcome(t, r, 200, "success", "1")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("50 requests took %v with the collector unavailable", took)
			}
			polltest.UntilTrue(t, 10*time.Second, func() bool {
				return s.metric(`retry_sidecar_trace_spans_dropped_total{reason="`+tc.reason+`"}`) > 0
			})
		})
	}
}

// splitSpans returns the one SERVER span and the CLIENT spans in start order.
func splitSpans(t *testing.T, spans []otlpreceiver.Span) (otlpreceiver.Span, []otlpreceiver.Span) {
	t.Helper()
	var server []otlpreceiver.Span
	var clients []otlpreceiver.Span
	for _, s := range spans {
		if hex.EncodeToString(s.GetTraceId()) != appTraceID {
			t.Errorf("span %s is in trace %x, want the app's %s", s.GetName(), s.GetTraceId(), appTraceID)
		}
		switch s.GetKind() {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = append(server, s)
		case tracepb.Span_SPAN_KIND_CLIENT:
			clients = append(clients, s)
		}
	}
	if len(server) != 1 || len(clients) != 3 {
		t.Fatalf("%d SERVER and %d CLIENT spans, want 1 and 3", len(server), len(clients))
	}
	slices.SortFunc(clients, func(a, b otlpreceiver.Span) int {
		return int(int64(a.GetStartTimeUnixNano()) - int64(b.GetStartTimeUnixNano()))
	})
	return server[0], clients
}

// wantAttrs checks attributes by their rendering; "" means absent.
func wantAttrs(t *testing.T, what string, s *tracepb.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attrOf(s.GetAttributes(), k); got != v {
			t.Errorf("%s span: %s = %q, want %q", what, k, got, v)
		}
	}
}

func attrOf(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return strings.Trim(otlpreceiver.Value(kv.GetValue()), `"`)
		}
	}
	return ""
}

func doubleOf(kvs []*commonpb.KeyValue, key string) float64 {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetDoubleValue()
		}
	}
	return -1
}

func eventsNamed(s *tracepb.Span, name string) []*tracepb.Span_Event {
	var out []*tracepb.Span_Event
	for _, e := range s.GetEvents() {
		if e.GetName() == name {
			out = append(out, e)
		}
	}
	return out
}

// assertNothingElseRecorded: the spans carry only the documented attributes,
// never another header, the query or the body.
func assertNothingElseRecorded(t *testing.T, spans []otlpreceiver.Span) {
	t.Helper()
	allowed := map[string]bool{"http.request.method": true, "http.response.status_code": true,
		"http.request.resend_count": true, "server.address": true, "server.port": true, "error.type": true,
		"http.response.header.server": true, "http.response.header.via": true, "retry.policy": true,
		"retry.upstream": true, "retry.outcome": true, "retry.attempts": true, "retry.not_before": true}
	for _, s := range spans {
		for _, kv := range s.GetAttributes() {
			if !allowed[kv.GetKey()] {
				t.Errorf("span %s records %s", s.GetName(), kv.GetKey())
			}
			if v := otlpreceiver.Value(kv.GetValue()); strings.Contains(v, "secret") || strings.Contains(v, "4111") {
				t.Errorf("span %s: %s = %s leaks the request", s.GetName(), kv.GetKey(), v)
			}
		}
	}
}
