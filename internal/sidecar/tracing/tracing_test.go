package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

const (
	sampledParent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	unsampledParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
)

// hooked is the sidecar's request path reduced to its tracing hooks: Start
// on the app's header, the Tracer around Inner and among the Observers, an
// upstream answering 200 at once in memory.
type hooked struct {
	tr  *Tracing
	rt  *retryhttp.Transport
	pol *retrypolicy.Policy
}

type okUpstream struct{}

func (okUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

type nopObserver struct{}

func (nopObserver) Observe(retryhttp.Event) {}

func newHooked(tb testing.TB, tr *Tracing) *hooked {
	pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{"up.test"}, MaxAttempts: 3,
		Deadline: 10 * time.Second, Backoff: retrypolicy.Backoff{Base: time.Millisecond, Max: time.Millisecond, Jitter: retrypolicy.JitterNone}})
	if err != nil {
		tb.Fatal(err)
	}
	var obs retryhttp.Observer = nopObserver{}
	if t := tr.Observer(); t != nil {
		obs = retryhttp.Observers{nopObserver{}, t}
	}
	inner := tr.WrapInner(okUpstream{})
	return &hooked{tr: tr, pol: pol, rt: &retryhttp.Transport{Inner: inner, Observer: obs, Route: retryhttp.Static(pol)}}
}

// do sends one request as Proxy.ServeHTTP and forward do: through the
// proxy's own copy of it, which carries the span.
func (h *hooked) do(req *http.Request) {
	out := req.WithContext(req.Context())
	ctx, span := h.tr.Start(req.Context(), req.Header, req.Method, "default/test", h.pol.Name())
	if span != nil {
		*out = *out.WithContext(ctx)
	}
	resp, err := libhooks.RoundTripPolicy(h.rt, out, h.pol)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	if span != nil {
		span.End(resp.StatusCode)
	}
}

func request(traceparent string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "http://up.test/v1", nil)
	req.Header["X-Request-Id"] = []string{"r-1"} // the Transport's own id costs nothing either way
	if traceparent != "" {
		req.Header["Traceparent"] = []string{traceparent}
	}
	return req
}

// discard is an exporter that takes every span at once.
type discard struct{ n atomic.Int64 }

func (d *discard) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(s)))
	return nil
}
func (*discard) Shutdown(context.Context) error { return nil }

func newTracing(tb testing.TB, sampler string, exp sdktrace.SpanExporter, counters Counters) *Tracing {
	tb.Helper()
	c, err := FromEnv(func(k string) string {
		return map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvSampler: sampler}[k]
	})
	if err != nil {
		tb.Fatal(err)
	}
	tr, err := newWithExporter(context.Background(), c, exp, counters)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// Tracing off, or on with the request not sampled, adds no allocation to a
// request (docs/observability.md#tracing).
func TestUnrecordedRequestAddsNoAllocation(t *testing.T) {
	off := newHooked(t, nil)
	for name, tc := range map[string]struct {
		sampler, traceparent string
	}{
		"tracing off": {"", sampledParent},
		"an unsampled parent under parentbased_always_on": {"parentbased_always_on", unsampledParent},
		"no parent under parentbased_traceidratio 0":      {"parentbased_traceidratio", ""},
		"any request under always_off":                    {"always_off", sampledParent},
	} {
		t.Run(name, func(t *testing.T) {
			var tr *Tracing
			if tc.sampler != "" {
				s := tc.sampler
				if s == "parentbased_traceidratio" {
					tr = newTracingArg(t, s, "0")
				} else {
					tr = newTracing(t, s, &discard{}, Counters{})
				}
			}
			h, req := newHooked(t, tr), request(tc.traceparent)
			base := testing.AllocsPerRun(200, func() { off.do(req) })
			if got := testing.AllocsPerRun(200, func() { h.do(req) }); got != base {
				t.Errorf("%v allocations per request, want %v as with tracing off", got, base)
			}
		})
	}
}

func newTracingArg(tb testing.TB, sampler, arg string) *Tracing {
	c, err := FromEnv(func(k string) string {
		return map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvSampler: sampler, EnvSamplerArg: arg}[k]
	})
	if err != nil {
		tb.Fatal(err)
	}
	tr, err := newWithExporter(context.Background(), c, &discard{}, Counters{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// BenchmarkRequest measures one request through the hooks: the added cost of
// tracing is each case's time minus "tracing off" (docs/observability.md#cost).
func BenchmarkRequest(b *testing.B) {
	for _, bc := range []struct {
		name, sampler, traceparent string
	}{
		{"tracing off", "", sampledParent},
		{"unsampled", "parentbased_always_on", unsampledParent},
		{"sampled", "parentbased_always_on", sampledParent},
	} {
		b.Run(strings.ReplaceAll(bc.name, " ", "_"), func(b *testing.B) {
			var tr *Tracing
			if bc.sampler != "" {
				tr = newTracing(b, bc.sampler, &discard{}, Counters{})
			}
			h := newHooked(b, tr)
			req := request(bc.traceparent)
			b.ReportAllocs()
			cpu0 := processCPU()
			n := 0
			for b.Loop() {
				h.do(req)
				n++
			}
			// CPU time of the whole process (export and GC included) per
			// request: on a shared machine wall time per op also counts
			// the time other processes had the CPU.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
		})
	}
}

// BenchmarkSDKSpans is the OpenTelemetry SDK's share of a sampled request:
// what BenchmarkRequest's sampled case costs the SDK alone, the same two
// spans (SERVER, and a CLIENT child) with the same attributes, set as they
// end, through the same provider and queue. The rest of the added cost is
// pkg/retryotel's and internal/sidecar/tracing's (docs/observability.md#cost).
func BenchmarkSDKSpans(b *testing.B) {
	tr := newTracing(b, "parentbased_always_on", &discard{}, Counters{})
	tracer := tr.provider.Tracer("bench")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), ParseTraceparent(sampledParent))
	server := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	client := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	attrs := &[8]attribute.KeyValue{}
	b.ReportAllocs()
	cpu0 := processCPU()
	n := 0
	for b.Loop() {
		ctx, s := tracer.Start(parent, "GET", server...)
		_, c := tracer.Start(ctx, "GET", client...)
		a := append(attrs[:0], retryotel.AttrMethod.String("GET"), retryotel.AttrServerAddr.String("up.test"),
			retryotel.AttrStatus.Int(200))
		c.SetAttributes(a...)
		c.End()
		a = append(attrs[:0], retryotel.AttrMethod.String("GET"), retryotel.AttrPolicy.String("default/test"),
			retryotel.AttrUpstream.String("up"), retryotel.AttrOutcome.String("success"), retryotel.AttrAttempts.Int(1),
			retryotel.AttrStatus.Int(200))
		s.SetAttributes(a...)
		s.End()
		n++
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkExportAt5000RequestsPerSecond sends one second of 5,000 sampled
// requests/s (2 spans each) through the OTLP/HTTP exporter to a receiver on
// loopback, with the default queue, and fails if one span is dropped.
func BenchmarkExportAt5000RequestsPerSecond(b *testing.B) {
	recv := otlpreceiver.New()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	var dropped, exported atomic.Int64
	tr := newTracing(b, "parentbased_always_on", exp, Counters{
		Dropped:  func(_ string, n int) { dropped.Add(int64(n)) },
		Exported: func(n int) { exported.Add(int64(n)) }})
	h := newHooked(b, tr)
	const rate, tick = 5000, time.Millisecond
	b.ReportAllocs()
	for b.Loop() {
		next := time.Now()
		for range time.Second / tick {
			for range rate / int(time.Second/tick) {
				h.do(request(sampledParent))
			}
			next = next.Add(tick)
			time.Sleep(time.Until(next))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.provider.ForceFlush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(dropped.Load()), "dropped")
	if dropped.Load() != 0 {
		b.Fatalf("%d spans dropped at %d requests/s (%d exported)", dropped.Load(), rate, exported.Load())
	}
}

// A span holding bytes that are not UTF-8 (which the OTLP encoding refuses)
// costs no other span of its batch: every span reaches a real OTLP receiver,
// the bad bytes replaced, even when they slipped past retryotel's cleaning
// (set here through the SDK directly).
func TestOneUnencodableSpanCostsNoOther(t *testing.T) {
	recv := otlpreceiver.New()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	var dropped, exported atomic.Int64
	tr := newTracing(t, "always_on", exp, Counters{
		Dropped:  func(_ string, n int) { dropped.Add(int64(n)) },
		Exported: func(n int) { exported.Add(int64(n)) }})
	tracer := tr.provider.Tracer("test")
	for _, name := range []string{"a", "evil\xff", "b", "c"} {
		_, s := tracer.Start(context.Background(), name)
		s.SetAttributes(retryotel.AttrHeaderServer.StringSlice([]string{"ok", name}), attribute.String("k\xfe", name))
		s.AddEvent("retry.wait", trace.WithAttributes(retryotel.AttrReason.String(name)))
		s.End()
	}
	if err := tr.provider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 4 || exported.Load() != 4 || dropped.Load() != 0 {
		t.Fatalf("the receiver got %d spans (%d exported, %d dropped), want all 4 in one batch", len(spans), exported.Load(), dropped.Load())
	}
	bad := spans[1].Span
	if bad.GetName() != "evil\uFFFD" {
		t.Errorf("the bad span named %q, want %q", bad.GetName(), "evil\uFFFD")
	}
	for _, kv := range append(bad.GetAttributes(), bad.GetEvents()[0].GetAttributes()...) {
		if got := otlpreceiver.Value(kv.GetValue()); strings.Contains(got, "\xff") || strings.Contains(kv.GetKey(), "\xfe") ||
			!strings.Contains(got, "evil\uFFFD") {
			t.Errorf("the bad span's %q = %q, want the bad bytes replaced by U+FFFD", kv.GetKey(), got)
		}
	}
}
