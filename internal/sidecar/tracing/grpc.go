package tracing

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The attributes of gRPC spans (OpenTelemetry's RPC conventions), beside
// retryotel's retry.* (docs/observability.md#grpc-calls).
const (
	AttrRPCSystem     = attribute.Key("rpc.system")
	AttrRPCService    = attribute.Key("rpc.service")
	AttrRPCMethod     = attribute.Key("rpc.method")
	AttrRPCGRPCStatus = attribute.Key("rpc.grpc.status_code")
)

// GRPCCall is the SERVER span of one gRPC call the sidecar proxies and the
// CLIENT span of its attempt in flight. A nil *GRPCCall (tracing off, or not
// sampled) records nothing.
type GRPCCall struct {
	tracer          trace.Tracer
	span, attempt   trace.Span
	ctx             context.Context
	sends           int
	service, method string
	valueLimit      int
}

// StartGRPC starts the span of the gRPC call to path (/package.Service/Method)
// the app sent with header h, its traceparent the parent, when the sampler
// records it; policy and upstream name what retries it.
func (t *Tracing) StartGRPC(ctx context.Context, h http.Header, path, policy, upstream string) *GRPCCall {
	if t == nil {
		return nil
	}
	ctx, ok := t.parent(ctx, h)
	if !ok {
		return nil
	}
	service, method := splitGRPCPath(path, t.valueLimit)
	tr := t.provider.Tracer(DefaultServiceName)
	var attrs []attribute.KeyValue
	if upstream != "" { // absent: passed through without a policy
		attrs = []attribute.KeyValue{retryotel.AttrPolicy.String(attrvalue.Clean(policy, t.valueLimit)),
			retryotel.AttrUpstream.String(attrvalue.Clean(upstream, t.valueLimit))}
	}
	ctx, span := tr.Start(ctx, service+"/"+method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return &GRPCCall{tracer: tr, span: span, ctx: ctx, service: service, method: method, valueLimit: t.valueLimit}
}

// splitGRPCPath is the service and method of a gRPC :path, cleaned for
// attributes; a path without the two parts is its own service.
func splitGRPCPath(path string, limit int) (service, method string) {
	service, method, _ = strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return attrvalue.Clean(service, limit), attrvalue.Clean(method, limit)
}

// StartAttempt opens the CLIENT span of the next attempt to addr (the
// upstream's host:port, its server.address and server.port) and sets its
// traceparent (and tracestate) in h, the attempt's own header map.
func (c *GRPCCall) StartAttempt(h http.Header, addr string) {
	if c == nil {
		return
	}
	c.EndAttempt(-1, "") // never left open
	ctx, span := c.tracer.Start(c.ctx, c.service+"/"+c.method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(c.serverAttrs(addr)...))
	c.attempt = span
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// serverAttrs are server.address and server.port of addr, as HTTP's
// attempts have them: the host alone when addr has no valid port.
func (c *GRPCCall) serverAttrs(addr string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, ""
	}
	if host == "" {
		return nil
	}
	a := []attribute.KeyValue{retryotel.AttrServerAddr.String(attrvalue.Clean(host, c.valueLimit))}
	if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
		a = append(a, retryotel.AttrServerPort.Int(n))
	}
	return a
}

// Wait records on the call's span a wait of d that started at start, for
// reason (retry.wait, as HTTP's requests record theirs).
func (c *GRPCCall) Wait(start time.Time, d time.Duration, reason retryotel.Reason) {
	if c == nil || d <= 0 {
		return
	}
	c.span.AddEvent(retryotel.EventWait, trace.WithTimestamp(start), trace.WithAttributes(
		retryotel.AttrDelay.Float64(d.Seconds()), retryotel.AttrReason.String(string(reason))))
}

// Admitted records the waits of an admission that ended at end, one event
// per wait, in the order admission passed them: in line for a pacing hold
// (paced), then the rate limit, the shared quota, the concurrency queue.
func (c *GRPCCall) Admitted(end time.Time, paced time.Duration, w limits.Waits) {
	if c == nil {
		return
	}
	start := end.Add(-paced - w.RateLimit - w.Quota - w.Queue)
	for _, wait := range [...]struct {
		d      time.Duration
		reason retryotel.Reason
	}{{paced, retryotel.ReasonPacing}, {w.RateLimit, retryotel.ReasonRateLimit}, {w.Quota, retryotel.ReasonQuota}, {w.Queue, retryotel.ReasonQueue}} {
		c.Wait(start, wait.d, wait.reason)
		start = start.Add(max(wait.d, 0))
	}
}

// EndAttempt ends the attempt in flight, if any, with its gRPC status (-1:
// none came) and, for a failed attempt, errorType.
func (c *GRPCCall) EndAttempt(code int, errorType string) {
	if c == nil || c.attempt == nil {
		return
	}
	a := c.rpcAttrs(code)
	if c.sends > 0 {
		a = append(a, retryotel.AttrResendCount.Int(c.sends))
	}
	c.sends++
	if errorType != "" {
		a = append(a, retryotel.AttrErrorType.String(errorType))
	}
	if errorType != "" || code > 0 {
		c.attempt.SetStatus(codes.Error, "")
	}
	c.attempt.SetAttributes(a...)
	c.attempt.End()
	c.attempt = nil
}

// End ends the call's span: code is the status the app was answered (-1:
// none, the app was gone), outcome and attempts the call's x-retry-outcome
// and x-retry-attempts.
func (c *GRPCCall) End(code int, outcome string, attempts int) {
	if c == nil {
		return
	}
	c.EndAttempt(-1, "")
	a := c.rpcAttrs(code)
	if outcome != "" {
		a = append(a, retryotel.AttrOutcome.String(outcome), retryotel.AttrAttempts.Int(attempts))
	}
	if serverError(code) {
		c.span.SetStatus(codes.Error, "")
	}
	c.span.SetAttributes(a...)
	c.span.End()
}

func (c *GRPCCall) rpcAttrs(code int) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 7)
	a = append(a, AttrRPCSystem.String("grpc"), AttrRPCService.String(c.service), AttrRPCMethod.String(c.method))
	if code >= 0 {
		a = append(a, AttrRPCGRPCStatus.Int(code))
	}
	return a
}

// serverError: the statuses the RPC conventions count as a server's error
// on a SERVER span (UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL,
// UNAVAILABLE, DATA_LOSS); the others are the caller's.
func serverError(code int) bool {
	switch code {
	case 2, 4, 12, 13, 14, 15:
		return true
	}
	return false
}
