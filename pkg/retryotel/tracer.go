package retryotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/notbefore"
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
}

// NewTracer builds spans with tp; its sampler decides which requests are
// recorded (an unrecorded request costs Start one non-recording span).
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(instrumentationName)}
}

// Request is the span of one logical request and of its attempt in flight.
// The Transport calls its hooks on the request's goroutine, one at a time.
//
// A span's attributes are kept here and set in one call as it ends: each
// SetAttributes and each start option costs the SDK allocations, and a
// sampled request is to cost little (docs/observability.md#cost). Samplers
// therefore see a span's name and kind, not its attributes.
type Request struct {
	t        *Tracer
	span     trace.Span
	ctx      context.Context // carries span: the parent of the attempts
	attempt  trace.Span      // the attempt in flight, nil between attempts
	sends    int
	policy   bool // the Transport's Observer ends the attempts
	answered bool // a local answer was recorded

	// The request span's attributes.
	method, policyName, upstream string
	outcome                      retrypolicy.Outcome
	attempts                     int
	notBefore                    time.Time

	at attemptAttrs // of the attempt in flight
}

// attrScratch holds the arrays a span's attributes are passed to
// SetAttributes in: a slice passed to an interface method escapes, so an
// array on the stack would be an allocation per call (the SDK copies them).
var attrScratch = sync.Pool{New: func() any { return new([8]attribute.KeyValue) }}

func putScratch(buf *[8]attribute.KeyValue) {
	clear(buf[:]) // hold no strings of the request
	attrScratch.Put(buf)
}

// attemptAttrs are the attributes of an attempt span, set as it ends.
type attemptAttrs struct {
	method, host string
	port, status int
	server, via  []string
}

// requestContext is the context a traced request is sent with: the SDK's
// context carrying the request span, and the Request (one allocation for
// both).
type requestContext struct {
	context.Context
	req Request
}

type requestKey struct{}

// Value implements context.Context.
func (c *requestContext) Value(key any) any {
	if _, ok := key.(requestKey); ok {
		return &c.req
	}
	return c.Context.Value(key)
}

// Start options, built once: a variadic slice of fresh options would cost
// allocations per span.
var (
	startServer   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	startInternal = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	startClient   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

func startOptions(kind trace.SpanKind) []trace.SpanStartOption {
	switch kind {
	case trace.SpanKindServer:
		return startServer
	case trace.SpanKindInternal:
		return startInternal
	case trace.SpanKindClient:
		return startClient
	}
	return []trace.SpanStartOption{trace.WithSpanKind(kind)}
}

// Start starts the span of a logical request as a child of the span (or
// remote span context) in ctx: kind SERVER in the sidecar, INTERNAL in
// process. policy and upstream name what retries it ("" for none: a request
// passed straight through, whose attempt span ends with its response head).
// It returns the request's context, to send it with, and its Request; or ctx
// and nil when the sampler did not record it.
func (t *Tracer) Start(ctx context.Context, kind trace.SpanKind, method, policy, upstream string) (context.Context, *Request) {
	sctx, span := t.tracer.Start(ctx, method, startOptions(kind)...)
	if !span.IsRecording() {
		span.End()
		return ctx, nil
	}
	rc := &requestContext{Context: sctx}
	rc.req = Request{t: t, span: span, ctx: sctx, policy: upstream != "",
		method: method, policyName: policy, upstream: upstream}
	return rc, &rc.req
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
	buf := attrScratch.Get().(*[8]attribute.KeyValue)
	defer putScratch(buf)
	a := buf[:0]
	a = append(a, AttrMethod.String(r.method))
	if r.policyName != "" {
		a = append(a, AttrPolicy.String(r.policyName))
	}
	if r.upstream != "" {
		a = append(a, AttrUpstream.String(r.upstream))
	}
	if r.outcome != "" {
		a = append(a, AttrOutcome.String(string(r.outcome)), AttrAttempts.Int(r.attempts))
	}
	if !r.notBefore.IsZero() {
		a = append(a, AttrNotBefore.String(notbefore.Format(r.notBefore)))
	}
	if status != 0 {
		a = append(a, AttrStatus.Int(status))
		if status >= 500 {
			r.span.SetStatus(codes.Error, "")
		}
	}
	r.span.SetAttributes(a...)
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
// carrying its traceparent. A retrying Transport gives each transmission a
// header map of its own (retryhttp.Transport.Inner), which takes it as it is;
// a request passed straight through is the caller's, whose map is copied (its
// values are never modified).
func (r *Request) startAttempt(req *http.Request) *http.Request {
	r.endAttempt("") // never left open; the Observer normally ended it
	_, span := r.t.tracer.Start(r.ctx, req.Method, startClient...)
	r.attempt = span
	r.at = attemptAttrs{method: req.Method}
	r.at.host, r.at.port = hostPort(req)
	out := req
	if !r.policy || req.Header == nil {
		out = new(http.Request)
		*out = *req
		out.Header = make(http.Header, len(req.Header)+2)
		for k, v := range req.Header {
			out.Header[k] = v
		}
	}
	setTraceContext(out.Header, span.SpanContext())
	return out
}

// received notes the attempt's response head (or its error). An attempt
// without a policy has no decision to wait for: its span ends here.
func (r *Request) received(resp *http.Response, err error) {
	if r.attempt == nil {
		return
	}
	if resp != nil {
		r.at.status = resp.StatusCode
		r.at.server, r.at.via = resp.Header["Server"], resp.Header["Via"]
	}
	if r.policy {
		return
	}
	switch {
	case err != nil:
		r.endAttempt(passthroughErrorType(err))
	case resp.StatusCode >= 400:
		r.endAttempt(statusString(resp.StatusCode))
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
	at := &r.at
	buf := attrScratch.Get().(*[8]attribute.KeyValue)
	defer putScratch(buf)
	a := buf[:0]
	a = append(a, AttrMethod.String(at.method))
	if at.host != "" {
		a = append(a, AttrServerAddr.String(at.host))
		if at.port != 0 {
			a = append(a, AttrServerPort.Int(at.port))
		}
	}
	if r.sends > 0 {
		a = append(a, AttrResendCount.Int(r.sends))
	}
	r.sends++
	if at.status != 0 {
		a = append(a, AttrStatus.Int(at.status))
	}
	if len(at.server) > 0 {
		a = append(a, AttrHeaderServer.StringSlice(at.server))
	}
	if len(at.via) > 0 {
		a = append(a, AttrHeaderVia.StringSlice(at.via))
	}
	if errorType != "" {
		a = append(a, AttrErrorType.String(errorType))
		r.attempt.SetStatus(codes.Error, "")
	}
	r.attempt.SetAttributes(a...)
	r.attempt.End()
	r.attempt, r.at = nil, attemptAttrs{}
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
		r.admitted(time.Now(), e)
	case retryhttp.EventOutcome:
		r.endAttempt("")
		if e.Attempt == 0 {
			r.localAnswer(e.Outcome)
		}
		r.outcome, r.attempts, r.notBefore = e.Outcome, e.Attempt, e.NotBefore
	}
}

// admitted records the waits of an admission that ended at end, one event
// per gate that made it wait, in the order admission passed them.
func (r *Request) admitted(end time.Time, e retryhttp.Event) {
	start := end.Add(-e.Delay - e.QuotaDelay - e.QueueDelay)
	for _, w := range [...]struct {
		d      time.Duration
		reason Reason
	}{{e.Delay, ReasonRateLimit}, {e.QuotaDelay, ReasonQuota}, {e.QueueDelay, ReasonQueue}} {
		if w.d > 0 {
			r.wait(start, w.d, w.reason)
			start = start.Add(w.d)
		}
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
		return statusString(e.Status)
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

// statusStrings are the error.type of the error statuses, formatted once.
var statusStrings = func() (s [200]string) {
	for i := range s {
		s[i] = strconv.Itoa(400 + i)
	}
	return s
}()

// statusString is status in decimal, without allocating for 400 to 599.
func statusString(status int) string {
	if status >= 400 && status < 400+len(statusStrings) {
		return statusStrings[status-400]
	}
	return strconv.Itoa(status)
}
