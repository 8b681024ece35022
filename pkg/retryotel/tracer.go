package retryotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// instrumentationName names the tracer of this package (the instrumentation scope).
const instrumentationName = "github.com/retrydev/retry-operator/pkg/retryotel"

// tracer builds the spans of retried requests: it is the Observer of a
// retryhttp.Transport, wraps its Inner (WrapInner), and starts each logical
// request's span before the request is handed to the Transport (start). The
// in-process Transport of this package drives one, the sidecar another
// (libhooks.NewTracer). Safe for concurrent use.
type tracer struct {
	tracer trace.Tracer
	limit  int // bytes of a value taken from the network (Clean)
}

// Option configures the spans of NewTransport.
type Option func(*options)

type options struct {
	valueLimit int
}

// WithValueLimit cuts every attribute value taken from the network to n bytes
// (n > 0), in place of the environment's limit.
func WithValueLimit(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.valueLimit = n
		}
	}
}

// newTracer builds spans with tp; its sampler decides which requests are
// recorded (an unrecorded request costs start one non-recording span).
// Values taken from the network are cut to limit bytes.
func newTracer(tp trace.TracerProvider, limit int) *tracer {
	return &tracer{tracer: tp.Tracer(instrumentationName), limit: limit}
}

// valueLimit is the limit opts set, else the one the environment sets
// (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, else
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT), else DefaultValueLimit (also when the
// environment's is not a positive integer).
func valueLimit(opts []Option) int {
	limit, err := attrvalue.LimitFromEnv(os.Getenv, DefaultValueLimit)
	if err != nil {
		limit = DefaultValueLimit
	}
	o := options{valueLimit: limit}
	for _, opt := range opts {
		opt(&o)
	}
	return o.valueLimit
}

func init() {
	libhooks.NewTracer = func(tp any, valueLimit int) libhooks.Tracer {
		return newTracer(tp.(trace.TracerProvider), valueLimit)
	}
}

// request is the span of one logical request and of its attempt in flight.
// The Transport calls its hooks on the request's goroutine, one at a time.
//
// A span's attributes are kept here and set in one call as it ends: each
// SetAttributes and each start option costs the SDK allocations, and a
// sampled request is to cost little (docs/observability.md#cost). Samplers
// therefore see a span's name and kind, not its attributes.
type request struct {
	t        *tracer
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
// context carrying the request span, and the request (one allocation for
// both).
type requestContext struct {
	context.Context
	req request
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

// start starts the span of a logical request as a child of the span (or
// remote span context) in ctx: kind SERVER in the sidecar, INTERNAL in
// process. policy and upstream name what retries it ("" for none: a request
// passed straight through, whose attempt span ends with its response head).
// It returns the request's context, to send it with, and its request; or ctx
// and nil when the sampler did not record it.
func (t *tracer) start(ctx context.Context, kind trace.SpanKind, method, policy, upstream string) (context.Context, *request) {
	method = methodOf(method, t.limit)
	sctx, span := t.tracer.Start(ctx, method, startOptions(kind)...)
	if !span.IsRecording() {
		span.End()
		return ctx, nil
	}
	rc := &requestContext{Context: sctx}
	rc.req = request{t: t, span: span, ctx: sctx, policy: upstream != "",
		method: method, policyName: attrvalue.Clean(policy, t.limit), upstream: attrvalue.Clean(upstream, t.limit)}
	return rc, &rc.req
}

// StartServer is start of a SERVER span, for the sidecar
// (libhooks.Tracer).
func (t *tracer) StartServer(ctx context.Context, method, policy, upstream string) (context.Context, libhooks.Span) {
	ctx, r := t.start(ctx, trace.SpanKindServer, method, policy, upstream)
	if r == nil {
		return ctx, nil // not a nil *request in a non-nil Span
	}
	return ctx, r
}

// requestOf is the request of t in ctx, or nil.
func (t *tracer) requestOf(ctx context.Context) *request {
	if ctx == nil {
		return nil
	}
	r, _ := ctx.Value(requestKey{}).(*request)
	if r == nil || r.t != t {
		return nil
	}
	return r
}

// End ends the request span, status being what the caller was answered (0:
// nothing, the request failed without a response).
func (r *request) End(status int) {
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
		a = append(a, AttrNotBefore.String(httpdate.Format(r.notBefore)))
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
func (t *tracer) WrapInner(inner http.RoundTripper) http.RoundTripper {
	if inner == nil {
		inner = http.DefaultTransport
	}
	return attemptTransport{t: t, inner: inner}
}

type attemptTransport struct {
	t     *tracer
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
func (r *request) startAttempt(req *http.Request) *http.Request {
	r.endAttempt("") // never left open; the Observer normally ended it
	method := methodOf(req.Method, r.t.limit)
	_, span := r.t.tracer.Start(r.ctx, method, startClient...)
	r.attempt = span
	r.at = attemptAttrs{method: method}
	r.at.host, r.at.port = hostPort(req)
	r.at.host = detach(r.at.host, r.t.limit)
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
func (r *request) received(resp *http.Response, err error) {
	if r.attempt == nil {
		return
	}
	if resp != nil {
		r.at.status = resp.StatusCode
		r.at.server = attrvalue.Values(resp.Header["Server"], r.t.limit)
		r.at.via = attrvalue.Values(resp.Header["Via"], r.t.limit)
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
func (r *request) endAttempt(errorType string) {
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
func (t *tracer) Observe(e retryhttp.Event) {
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
func (r *request) admitted(end time.Time, e retryhttp.Event) {
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
func (r *request) wait(start time.Time, d time.Duration, reason Reason) {
	r.span.AddEvent(EventWait, trace.WithTimestamp(start), trace.WithAttributes(
		AttrDelay.Float64(d.Seconds()), AttrReason.String(string(reason))))
}

// localAnswer records, once, that the request was answered without reaching
// the upstream.
func (r *request) localAnswer(o retrypolicy.Outcome) {
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
