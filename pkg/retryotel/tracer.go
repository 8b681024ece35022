package retryotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// instrumentationName names the tracer of this package (the instrumentation scope).
const instrumentationName = "github.com/retrydev/retry-operator/pkg/retryotel"

// Tracer builds the spans of retried requests. Hook it into a
// retryhttp.Transport as its Observer and around its Inner (WrapInner), and
// call Start for each logical request before handing it to the Transport.
// Safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// NewTracer builds spans with tp; its sampler decides which requests are
// recorded (an unrecorded request costs Start one non-recording span).
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(instrumentationName)}
}

// Request is the span of one logical request and of its attempt in flight.
// The Transport calls its hooks on the request's goroutine, one at a time.
type Request struct {
	t        *Tracer
	span     trace.Span
	ctx      context.Context // carries span: the parent of the attempts
	attempt  trace.Span      // the attempt in flight, nil between attempts
	sends    int
	policy   bool // the Transport's Observer ends the attempts
	answered bool // a local answer was recorded
}

type requestKey struct{}

// Start starts the span of a logical request as a child of the span (or
// remote span context) in ctx: kind SERVER in the sidecar, INTERNAL in
// process. policy and upstream name what retries it ("" for none: a request
// passed straight through, whose attempt span ends with its response head).
// It returns the request's context, to send it with, and its Request; or ctx
// and nil when the sampler did not record it.
func (t *Tracer) Start(ctx context.Context, kind trace.SpanKind, method, policy, upstream string) (context.Context, *Request) {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, AttrMethod.String(method))
	if policy != "" {
		attrs = append(attrs, AttrPolicy.String(policy))
	}
	if upstream != "" {
		attrs = append(attrs, AttrUpstream.String(upstream))
	}
	sctx, span := t.tracer.Start(ctx, method, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		span.End()
		return ctx, nil
	}
	r := &Request{t: t, span: span, ctx: sctx, policy: upstream != ""}
	return context.WithValue(sctx, requestKey{}, r), r
}

// requestOf is the Request of t in ctx, or nil.
func (t *Tracer) requestOf(ctx context.Context) *Request {
	if ctx == nil {
		return nil
	}
	r, _ := ctx.Value(requestKey{}).(*Request)
	if r == nil || r.t != t {
		return nil
	}
	return r
}

// End ends the request span, status being what the caller was answered (0:
// nothing, the request failed without a response).
func (r *Request) End(status int) {
	r.endAttempt("")
	if status != 0 {
		r.span.SetAttributes(AttrStatus.Int(status))
		if status >= 500 {
			r.span.SetStatus(codes.Error, "")
		}
	}
	r.span.End()
}

// WrapInner returns inner (nil: http.DefaultTransport) wrapped so that each
// attempt of a traced request is a CLIENT span whose context the upstream
// receives as its traceparent (replacing the caller's).
func (t *Tracer) WrapInner(inner http.RoundTripper) http.RoundTripper {
	if inner == nil {
		inner = http.DefaultTransport
	}
	return attemptTransport{t: t, inner: inner}
}

type attemptTransport struct {
	t     *Tracer
	inner http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (a attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := a.t.requestOf(req.Context())
	if r == nil {
		return a.inner.RoundTrip(req)
	}
	out := r.startAttempt(req)
	resp, err := a.inner.RoundTrip(out)
	r.received(resp, err)
	return resp, err
}

// startAttempt opens the span of the next transmission of req and returns req
// carrying its traceparent. The header is copied: the one of req may be the
// caller's own.
func (r *Request) startAttempt(req *http.Request) *http.Request {
	r.endAttempt("") // never left open; the Observer normally ended it
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrMethod.String(req.Method))
	if host, port := hostPort(req); host != "" {
		attrs = append(attrs, AttrServerAddr.String(host))
		if port != 0 {
			attrs = append(attrs, AttrServerPort.Int(port))
		}
	}
	if r.sends > 0 {
		attrs = append(attrs, AttrResendCount.Int(r.sends))
	}
	r.sends++
	ctx, span := r.t.tracer.Start(r.ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	r.attempt = span
	out := *req
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = make(http.Header, 2)
	}
	r.t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return &out
}

// received notes the attempt's response head (or its error). An attempt
// without a policy has no decision to wait for: its span ends here.
func (r *Request) received(resp *http.Response, err error) {
	span := r.attempt
	if span == nil {
		return
	}
	if resp != nil {
		var buf [3]attribute.KeyValue
		attrs := append(buf[:0], AttrStatus.Int(resp.StatusCode))
		if v := resp.Header["Server"]; len(v) > 0 {
			attrs = append(attrs, AttrHeaderServer.StringSlice(v))
		}
		if v := resp.Header["Via"]; len(v) > 0 {
			attrs = append(attrs, AttrHeaderVia.StringSlice(v))
		}
		span.SetAttributes(attrs...)
	}
	if r.policy {
		return
	}
	switch {
	case err != nil:
		r.endAttempt(passthroughErrorType(err))
	case resp.StatusCode >= 400:
		r.endAttempt(strconv.Itoa(resp.StatusCode))
	default:
		r.endAttempt("")
	}
}

// endAttempt ends the attempt in flight, if any, failed with errorType
// unless that is "".
func (r *Request) endAttempt(errorType string) {
	if r.attempt == nil {
		return
	}
	if errorType != "" {
		r.attempt.SetAttributes(AttrErrorType.String(errorType))
		r.attempt.SetStatus(codes.Error, "")
	}
	r.attempt.End()
	r.attempt = nil
}

// Observe implements retryhttp.Observer: it ends attempt spans with their
// decision, records waits and local answers, and the request's outcome.
func (t *Tracer) Observe(e retryhttp.Event) {
	r := t.requestOf(e.Context)
	if r == nil {
		return
	}
	switch e.Kind {
	case retryhttp.EventAttempt:
		if r.attempt != nil {
			r.endAttempt(attemptErrorType(e))
		} else if e.Outcome != "" {
			r.localAnswer(e.Outcome) // refused by admission: shed
		}
		if e.Action == retrypolicy.Retry {
			r.wait(time.Now(), e.Delay, retryReason(e.RetryAfter))
		}
	case retryhttp.EventHeld:
		if e.Outcome == "" {
			r.wait(time.Now().Add(-e.Delay), e.Delay, ReasonPacing)
		} else {
			r.localAnswer(e.Outcome)
		}
	case retryhttp.EventAdmitted:
		start := time.Now().Add(-e.Delay - e.QueueDelay)
		if e.Delay > 0 {
			r.wait(start, e.Delay, ReasonRateLimit)
		}
		if e.QueueDelay > 0 {
			r.wait(start.Add(e.Delay), e.QueueDelay, ReasonQueue)
		}
	case retryhttp.EventOutcome:
		r.endAttempt("")
		if e.Attempt == 0 {
			r.localAnswer(e.Outcome)
		}
		attrs := []attribute.KeyValue{AttrOutcome.String(string(e.Outcome)), AttrAttempts.Int(e.Attempt)}
		if !e.NotBefore.IsZero() {
			attrs = append(attrs, AttrNotBefore.String(retrypolicy.FormatNotBefore(e.NotBefore)))
		}
		r.span.SetAttributes(attrs...)
	}
}

// wait records a wait of d that started at start.
func (r *Request) wait(start time.Time, d time.Duration, reason Reason) {
	r.span.AddEvent(EventWait, trace.WithTimestamp(start), trace.WithAttributes(
		AttrDelay.Float64(d.Seconds()), AttrReason.String(string(reason))))
}

// localAnswer records, once, that the request was answered without reaching
// the upstream.
func (r *Request) localAnswer(o retrypolicy.Outcome) {
	if r.answered {
		return
	}
	r.answered = true
	r.span.AddEvent(EventLocalAnswer, trace.WithAttributes(AttrOutcome.String(string(o))))
}

// retryReason is why a retry waited: its response's Retry-After when it had
// a valid one (the wait is at least the server's), else the backoff.
func retryReason(retryAfter retryhttp.RetryAfterParse) Reason {
	switch retryAfter {
	case "", retryhttp.RetryAfterAbsent, retryhttp.RetryAfterMalformed:
		return ReasonBackoff
	}
	return ReasonRetryAfter
}

// attemptErrorType is the error.type of a decided attempt: the status when it
// is an error (>= 400), "timeout" when a bound cut it, else its error class.
func attemptErrorType(e retryhttp.Event) string {
	switch {
	case e.Status >= 400:
		return strconv.Itoa(e.Status)
	case e.Status != 0:
		return ""
	case e.Phase != "":
		return "timeout"
	case e.ErrorClass != retrypolicy.NoError:
		return e.ErrorClass.String()
	}
	return ""
}

// passthroughErrorType is the error.type of an attempt without a policy that
// got no response.
func passthroughErrorType(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return retrypolicy.Canceled.String()
	}
	return "_OTHER"
}

// hostPort is the host and port an attempt goes to (port 0 when the URL
// names none).
func hostPort(req *http.Request) (string, int) {
	if req.URL == nil {
		return "", 0
	}
	host, p := req.URL.Hostname(), req.URL.Port()
	if p == "" {
		return host, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}
