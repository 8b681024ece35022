package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// DefaultServiceName is the service.name of the sidecar's spans unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names another.
const DefaultServiceName = "retry-sidecar"

// Counters receive what the export queue did with the spans.
type Counters struct {
	Dropped  func(reason string, n int)
	Exported func(n int)
}

// Tracing records the sidecar's requests. A nil *Tracing records nothing
// and costs nothing: tracing is off.
type Tracing struct {
	sampler    Sampler
	tracer     libhooks.Tracer
	provider   *sdktrace.TracerProvider
	valueLimit int
}

// New starts the export c asks for, or returns nil when c is not Enabled.
func New(ctx context.Context, c Config, counters Counters) (*Tracing, error) {
	if !c.Enabled {
		return nil, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if c.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, err
	}
	return newWithExporter(ctx, c, exp, counters)
}

// newWithExporter is New over exp.
func newWithExporter(ctx context.Context, c Config, exp sdktrace.SpanExporter, counters Counters) (*Tracing, error) {
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, err
	}
	if counters.Dropped == nil {
		counters.Dropped = func(string, int) {}
	}
	if counters.Exported == nil {
		counters.Exported = func(int) {}
	}
	if c.ValueLimit <= 0 {
		c.ValueLimit = retryotel.DefaultValueLimit
	}
	// The SDK cuts every attribute value too (in characters, where the Tracer
	// counts bytes), the values the Tracer does not take from the network
	// included.
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = c.ValueLimit
	// The Sampler has decided before a span is started (Start): the SDK
	// records every span it is asked for.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithSpanProcessor(newQueue(exp, c.Queue, counters.Dropped, counters.Exported)))
	return &Tracing{sampler: c.Sampler, tracer: libhooks.NewTracer(tp, c.ValueLimit), provider: tp, valueLimit: c.ValueLimit}, nil
}

// Observer is the span builder as the upstream Transport's Observer (nil
// when off): it ends the attempt spans and records the waits.
func (t *Tracing) Observer() retryhttp.Observer {
	if t == nil {
		return nil
	}
	return t.tracer.(retryhttp.Observer)
}

// WrapInner wraps the upstream Transport's Inner so that each attempt of a
// traced request is a CLIENT span; inner itself when tracing is off.
func (t *Tracing) WrapInner(inner http.RoundTripper) http.RoundTripper {
	if t == nil {
		return inner
	}
	return t.tracer.WrapInner(inner)
}

// Start starts the SERVER span of a request the app sent with header h, its
// traceparent the parent, when the sampler records it; else it returns ctx
// and nil without allocating.
func (t *Tracing) Start(ctx context.Context, h http.Header, method, policy, upstream string) (context.Context, libhooks.Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, ok := t.parent(ctx, h)
	if !ok {
		return ctx, nil
	}
	return t.tracer.StartServer(ctx, method, policy, upstream)
}

// parent is ctx carrying the app's span context from h (traceparent,
// tracestate), and whether the sampler records the request.
func (t *Tracing) parent(ctx context.Context, h http.Header) (context.Context, bool) {
	var parent trace.SpanContext
	if v := h["Traceparent"]; len(v) == 1 {
		parent = ParseTraceparent(v[0])
	}
	if !t.sampler.Sample(parent) {
		return ctx, false
	}
	if parent.IsValid() {
		if v := h["Tracestate"]; len(v) > 0 && len(v[0]) <= maxTraceState {
			// A copy: the members slice the value, which may slice the
			// whole request head, kept alive by every span of the trace.
			if ts, err := trace.ParseTraceState(strings.Clone(v[0])); err == nil {
				parent = parent.WithTraceState(ts)
			}
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return ctx, true
}

// maxTraceState is the longest tracestate trace.ParseTraceState accepts: 32
// members of a 256-byte key, "=" and a 256-byte value, comma-separated.
const maxTraceState = 32*(256+1+256) + 31

// Shutdown exports what is queued, within ctx, and stops the export.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
