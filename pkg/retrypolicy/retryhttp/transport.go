package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Transport is an http.RoundTripper that applies a Policy to each request
// (R4–R10): it buffers replayable bodies, marks attempts with X-Retry-Attempt,
// decides with Policy.DecideAt, honours Retry-After, the deadline, the outage
// budget and admission, and returns the final response with X-Retry-Outcome and
// X-Retry-Attempts (plus X-Retry-Not-Before when deferred), or an *Error.
//
// The policy of a request is chosen by Route; a request without one passes
// straight to Inner: one attempt, nothing added. The runtime state (budget,
// limiter, gate) is the Policy's Limits, so the sidecar swaps a new Set (after
// Registry.Adopt) into Route without losing it.
//
// The deadline bounds each attempt up to its response headers, every wait and
// every drain; the body of the response given back is not cut off by it (only
// by the caller's own context), so a large download is not killed by a retry
// policy. The one exception is a retryable answer given back (its status is
// one the policy retries, but no retry follows): its first MaxDrainBytes are
// read before it is returned, by the deadline, and one whose body stalls past
// it ends deadline-exceeded (docs/retry-semantics.md#r9).
//
// All fields are optional except Route; set them before first use.
type Transport struct {
	// Inner sends each attempt; nil means http.DefaultTransport. Each
	// transmission it gets is a request of the Transport's own, with a Header
	// map of its own (the values are the caller's): Inner may set headers on
	// it (pkg/retryotel sets the attempt's traceparent).
	Inner http.RoundTripper
	// Route picks the policy of a request, or nil for none. Typical values:
	// set.MatchRequest, Static(p), or a func that loads the current *Set from an
	// atomic.Pointer and calls MatchRequest.
	Route func(*http.Request) *retrypolicy.Policy
	// Observer receives attempt and outcome events (nil: none).
	Observer Observer
	// Clock is used for every time measurement and timer; nil means the real clock.
	Clock clock.Clock
	// Sleep waits between attempts; nil means a timer on Clock that ends at once
	// when the request's context ends.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random returns numbers in [0, 1] for jitter; nil means math/rand/v2.
	Random func() float64
	// MaxDrainBytes bounds the drain of a retried response and the read
	// ahead of a retryable one given back; 0 means 64 KiB, negative means
	// neither.
	MaxDrainBytes int64
	// ReplayMemory caps the bytes all replay buffers hold at once; nil means no
	// cap. A body that does not fit is streamed once, never replayed.
	ReplayMemory *ReplayMemory
}

// Static routes every request to p.
func Static(p *retrypolicy.Policy) func(*http.Request) *retrypolicy.Policy {
	return func(*http.Request) *retrypolicy.Policy { return p }
}

var (
	errDeadline = errors.New("retrypolicy: deadline exceeded")
)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var p *retrypolicy.Policy
	if t.Route != nil {
		p = t.Route(req)
	}
	return t.roundTripPolicy(req, p)
}

// roundTripPolicy is RoundTrip with the policy already looked up: the
// sidecar's proxy and pkg/retryotel's Transport look it up once for their own
// use too (libhooks.RoundTripPolicy).
func (t *Transport) roundTripPolicy(req *http.Request, p *retrypolicy.Policy) (*http.Response, error) {
	if p == nil {
		return t.inner().RoundTrip(req)
	}
	c := &call{t: t, p: p, req: req, clk: t.clock()}
	return c.run()
}

func init() {
	libhooks.RoundTripPolicy = func(rt http.RoundTripper, req *http.Request, p *retrypolicy.Policy) (*http.Response, error) {
		return rt.(*Transport).roundTripPolicy(req, p)
	}
}

func (t *Transport) inner() http.RoundTripper {
	if t.Inner != nil {
		return t.Inner
	}
	return http.DefaultTransport
}

func (t *Transport) clock() clock.Clock {
	if t.Clock != nil {
		return t.Clock
	}
	return realClock
}

var realClock clock.Clock = clock.Real{}

func (t *Transport) random() float64 {
	if t.Random != nil {
		return t.Random()
	}
	return rand.Float64()
}

func (c *call) sleep(ctx context.Context, d time.Duration) error {
	if c.t.Sleep != nil {
		return c.t.Sleep(ctx, d)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	tm := c.clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C():
		return nil
	}
}

// call is the state of one logical request. It is one allocation that also
// serves as the body wrapper of the returned response, so the common path
// allocates little.
type call struct {
	t   *Transport
	p   *retrypolicy.Policy
	req *http.Request
	clk clock.Clock

	deadline time.Time
	nested   bool
	idem     bool // method replayable or idempotency key present
	body     bodySource
	reserved int64 // bytes of Transport.ReplayMemory held by body
	id       string
	idBuf    [16]byte // backing of a generated id

	start time.Time // of the logical request, on clk

	// the current attempt
	actx     attemptContext // the first attempt's context (later ones allocate their own)
	cancel   context.CancelFunc
	timer    clock.Timer  // on an injected clock
	rtimer   *time.Timer  // on the real clock (saves a wrapper per attempt)
	vals     [3]string    // backing of X-Retry-Attempt (first attempt), -Outcome, -Attempts
	fired    atomic.Int32 // a bound: the attempt's timer sets it from another goroutine
	firedWhy bound        // fired, read once the attempt's headers or error arrived
	ticket   limits.Ticket

	// the returned response body
	rc       io.ReadCloser
	doneOnce sync.Once
}

// bound is the limit that ended an attempt before its response headers.
type bound int32

func (b bound) String() string {
	switch b {
	case firedPerTry:
		return "perTryTimeout"
	case firedDeadline:
		return "deadline"
	}
	return "none"
}

const (
	firedNone     bound = iota
	firedPerTry         // perTryTimeout
	firedDeadline       // the logical request's deadline
)

func (c *call) run() (*http.Response, error) {
	ctx := c.req.Context()
	c.begin(ctx)
	if err := c.prepareBody(); err != nil {
		return c.fail(retrypolicy.OutcomeUpstreamError, 0, err)
	}
	lim := c.p.Limits()
	budget := lim.Budget()

	for n := 1; ; n++ {
		admitted, resp, err, done := c.admit(ctx, lim, n)
		if done {
			return resp, err
		}
		if n == 1 {
			budget.RecordFirstAt(admitted)
		}
		out, err := c.attemptRequest(ctx, n, admitted)
		if err != nil {
			c.endAttempt()
			return c.fail(retrypolicy.OutcomeNotReplayable, n-1, err)
		}
		resp, received, err := c.send(out)

		a, ev := c.assess(ctx, n, resp, err, received)
		if a.Err == retrypolicy.Canceled {
			c.endAttempt()
			c.observeAttempt(&ev, n, a, retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: retrypolicy.OutcomeCanceled})
			return c.fail(retrypolicy.OutcomeCanceled, n, err)
		}
		if a.Err != retrypolicy.NoError && c.firedWhy == firedDeadline {
			c.endAttempt()
			d := retrypolicy.Decision{Action: retrypolicy.Defer, Outcome: retrypolicy.OutcomeDeadlineExceeded,
				NotBefore: received.Add(c.p.Backoff().Delay(n-1, a.Random))}
			c.observeAttempt(&ev, n, a, d)
			return c.failDecided(d, n, err, ev.Phase)
		}
		d := c.p.DecideAt(received, a)
		if d.Action == retrypolicy.Retry && !budget.TryRetryAt(received) {
			d = retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: retrypolicy.OutcomeBudgetExhausted}
		}
		c.startHolds(&ev, resp, received, d) // pacing.go
		if d.Action != retrypolicy.Retry && resp != nil && c.p.RetriesStatus(resp.StatusCode) && !c.readAhead(resp) {
			d, err = c.answerLost(ctx, d, received, a)
			resp = nil
		}
		c.observeAttempt(&ev, n, a, d)
		if d.Action != retrypolicy.Retry {
			if resp == nil {
				c.endAttempt()
				return c.failDecided(d, n, err, ev.Phase)
			}
			return c.finish(resp, d, n), nil
		}
		// R9: give the connection back before waiting. The drain counts inside
		// the wait, which is anchored to the receipt (R1): the next attempt
		// starts at max(received+Delay, end of drain).
		if resp != nil {
			c.drain(resp.Body, c.clk.Now())
		}
		c.endAttempt()
		if err := c.sleep(ctx, waitLeft(received, d.Delay, c.clk.Now())); err != nil {
			return c.fail(retrypolicy.OutcomeCanceled, n, err)
		}
	}
}

// answerLost is what a request ends with when the body of the retryable
// answer it was to be given did not arrive (readAhead): canceled if the caller
// left, else deadline-exceeded, not before the time decided at receipt (the
// server's wait, or the local backoff).
func (c *call) answerLost(ctx context.Context, d retrypolicy.Decision, received time.Time, a retrypolicy.Attempt) (retrypolicy.Decision, error) {
	if err := ctx.Err(); err != nil {
		return retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: retrypolicy.OutcomeCanceled}, err
	}
	if d.Action != retrypolicy.Defer {
		d.NotBefore = received.Add(c.p.Backoff().Delay(a.Number-1, a.Random))
	}
	return retrypolicy.Decision{Action: retrypolicy.Defer, Outcome: retrypolicy.OutcomeDeadlineExceeded, NotBefore: d.NotBefore}, errDeadline
}

// begin fixes what holds for every attempt of the logical request: its
// deadline (the policy's or the caller's, whichever is nearer), whether it
// arrived from another retrying layer, whether its method or idempotency key
// makes it replayable, and its request id.
func (c *call) begin(ctx context.Context) {
	req := c.req
	start := c.clk.Now()
	c.start = start
	c.deadline = start.Add(c.p.Deadline())
	if d, ok := ctx.Deadline(); ok {
		if rem := time.Until(d); start.Add(rem).Before(c.deadline) {
			c.deadline = start.Add(rem)
		}
	}
	_, c.nested = req.Header[HeaderAttempt]
	c.idem = c.p.MethodReplayable(req.Method)
	if !c.idem && c.p.IdempotencyKeyHeader() != "" {
		if v := req.Header[c.p.IdempotencyKeyHeader()]; len(v) > 0 && v[0] != "" {
			c.idem = true
		}
	}
	if c.t.Observer != nil {
		c.id = req.Header.Get(HeaderRequestID)
		if c.id == "" {
			c.id = c.newRequestID()
		}
	}
}

// admit clears transmission n for sending (R7, R8, pacing): the caller is still
// there, the upstream is not held, admission gave a slot within the deadline.
// It returns the admission time, or done with what the request ends with.
func (c *call) admit(ctx context.Context, lim *limits.State, n int) (admitted time.Time, resp *http.Response, err error, done bool) {
	// R8: the caller may have gone during the wait: nothing more is sent.
	if err := ctx.Err(); err != nil {
		resp, err = c.fail(retrypolicy.OutcomeCanceled, n-1, err)
		return time.Time{}, resp, err, true
	}
	if resp, err := c.awaitHold(ctx, n); resp != nil || err != nil {
		return time.Time{}, resp, err, true // the upstream is held (pacing.go)
	}
	now := c.clk.Now()
	tk, ra, err := lim.Admit(ctx, c.clk, c.sleep, c.deadline.Sub(now)-c.p.Reserve())
	if err != nil {
		switch {
		case errors.Is(err, limits.ErrShed):
			resp, err = c.shed(n, ra)
		case errors.Is(err, limits.ErrQuotaDenied):
			resp, err = c.answerHeld(n, c.clk.Now().Add(ra)), nil
		default:
			resp, err = c.fail(retrypolicy.OutcomeCanceled, n-1, err)
		}
		return time.Time{}, resp, err, true
	}
	if err := ctx.Err(); err != nil { // admission may have waited
		tk.Release(c.clk.Now())
		resp, err = c.fail(retrypolicy.OutcomeCanceled, n-1, err)
		return time.Time{}, resp, err, true
	}
	c.ticket = tk
	admitted = c.clk.Now()
	c.observeAdmitted(n, tk.Waited)
	if !admitted.Before(c.deadline) {
		c.endAttempt()
		resp, err = c.failDecided(retrypolicy.Decision{Action: retrypolicy.Defer, Outcome: retrypolicy.OutcomeDeadlineExceeded, NotBefore: admitted}, n-1, errDeadline, "")
		return time.Time{}, resp, err, true
	}
	return admitted, nil, nil, false
}

// send transmits one attempt and notes when its answer was received. A
// response whose headers raced the attempt's timer is the timeout it is.
func (c *call) send(out *http.Request) (*http.Response, time.Time, error) {
	resp, err := c.t.inner().RoundTrip(out)
	received := c.clk.Now()
	if !c.stopTimer() && bound(c.fired.Load()) != firedNone && err == nil {
		// The timer fired as the headers arrived; the body is cut.
		resp.Body.Close()
		resp, err = nil, context.Canceled
	}
	c.firedWhy = bound(c.fired.Load())
	return resp, received, err
}

// assess describes attempt n for the decision (R1, R4) and the observers:
// the error class and timeout phase without a response; the status, the
// Retry-After hint and the clock skew with one.
func (c *call) assess(ctx context.Context, n int, resp *http.Response, err error, received time.Time) (retrypolicy.Attempt, Event) {
	a := retrypolicy.Attempt{Number: n, Replayable: c.idem && c.rewindable(), Rewindable: c.rewindable(),
		Nested: c.nested, Deadline: c.deadline, Random: c.t.random()}
	var ev Event
	if err != nil {
		a.Err = c.classify(ctx, err)
		ev.Phase = timeoutPhase(err, c.firedWhy != firedNone)
		a.Reset = a.Err == retrypolicy.Ambiguous && ev.Phase == ""
		return a, ev
	}
	a.Status = resp.StatusCode
	ev.RetryAfter = RetryAfterAbsent
	date := firstValue(resp.Header["Date"])
	if date != "" {
		// R1: the skew is reported whenever the response is dated.
		ev.Skew, ev.HasSkew = httpdate.Skew(date, received)
	}
	if v, ok := resp.Header["Retry-After"]; ok && len(v) > 0 {
		h, perr := retrypolicy.ParseRetryAfter(v[0], received, date)
		var pe *retrypolicy.ParseError
		if errors.As(perr, &pe) {
			ev.RetryAfter, ev.RetryAfterReason = RetryAfterMalformed, pe.Reason
		} else {
			a.Hint, a.HasHint = h, true
			ev.RetryAfter = RetryAfterParse(h.Form.String())
		}
	}
	return a, ev
}

// attemptRequest builds the outgoing request of transmission n: a shallow copy
// with its own context (deadline and per-try timeout), X-Retry-Attempt, and a
// fresh body. The caller's request is never modified.
func (c *call) attemptRequest(ctx context.Context, n int, now time.Time) (*http.Request, error) {
	// One timer bounds the attempt by the nearer of the per-try timeout and the
	// deadline; it is stopped as soon as the response headers arrive. now is
	// the time the attempt was admitted (read once: the clock costs a vDSO call).
	limit, why := c.deadline.Sub(now), firedDeadline
	if pt := c.p.PerTryTimeout(); pt > 0 && pt < limit {
		limit, why = pt, firedPerTry
	}
	actx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.fired.Store(int32(firedNone))
	fire := func() { c.fired.Store(int32(why)); cancel() }
	switch {
	case limit <= 0:
		fire()
	case c.clk == realClock:
		c.rtimer = time.AfterFunc(limit, fire)
	default:
		c.timer = c.clk.AfterFunc(limit, fire)
	}
	// A fresh shallow copy per attempt: an earlier attempt's request may still be
	// referenced by Inner (e.g. its body still being written), so only the first
	// attempt uses the context value embedded in the call.
	var attemptCtx *attemptContext
	if n == 1 {
		c.actx = attemptContext{Context: actx, connectTimeout: c.p.ConnectTimeout()}
		attemptCtx = &c.actx
	} else {
		attemptCtx = &attemptContext{Context: actx, connectTimeout: c.p.ConnectTimeout()}
	}
	out := c.req.WithContext(attemptCtx)
	switch c.body.kind {
	case bodyGetBody:
		if n > 1 {
			b, err := c.req.GetBody()
			if err != nil {
				return nil, err
			}
			out.Body = b
		}
	case bodyBuffered:
		out.Body = &replayBody{Reader: bytes.NewReader(c.body.buf)}
		out.ContentLength = int64(len(c.body.buf))
		out.GetBody = c.body.getBody
	case bodyTracked, bodyStream:
		if c.body.tracked != nil {
			out.Body = c.body.tracked
		}
		out.GetBody = nil
	}
	h := make(http.Header, len(c.req.Header)+1)
	for k, v := range c.req.Header {
		h[k] = v // values are never modified, only the map
	}
	switch {
	case c.nested: // the outer retrier's X-Retry-Attempt is passed on
	case n == 1:
		c.vals[0] = attemptString(n)
		h[HeaderAttempt] = c.vals[0:1:1]
	default:
		h[HeaderAttempt] = []string{attemptString(n)}
	}
	out.Header = h
	return out, nil
}

// stopTimer stops the attempt's timer; false if it had already fired.
func (c *call) stopTimer() bool {
	stopped := true
	if c.rtimer != nil {
		stopped = c.rtimer.Stop()
		c.rtimer = nil
	}
	if c.timer != nil {
		stopped = c.timer.Stop()
		c.timer = nil
	}
	return stopped
}

// endAttempt releases what the current attempt held.
func (c *call) endAttempt() {
	c.stopTimer()
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.ticket.Release(c.clk.Now())
	c.ticket = limits.Ticket{}
}

// classify says what became of an attempt without a response. An attempt
// that never got past the dial or the TLS handshake sent nothing, whichever
// timer cut it (connectTimeout, perTryTimeout, the deadline, the client's own
// dial timeout): a connect failure (docs/retry-semantics.md#timeouts). Any
// other attempt cut by the Transport's own bound may have been written.
func (c *call) classify(ctx context.Context, err error) retrypolicy.ErrorClass {
	switch {
	case ctx.Err() != nil:
		return retrypolicy.Canceled
	case errors.Is(err, ErrUntrustedCertificate):
		return retrypolicy.Untrusted
	case nothingSent(err):
		return retrypolicy.ConnectFailure
	case c.firedWhy != firedNone:
		return retrypolicy.Ambiguous // timed out: the request may have been written
	case errors.Is(err, ErrMalformedResponse):
		return retrypolicy.Malformed
	}
	return retrypolicy.Ambiguous
}

// nothingSent reports whether err ended an attempt before any byte of it was
// written: the dial or the TLS handshake failed (tagged PhaseConnect or
// PhaseTLS by the upstream client, or a dial or DNS error of any client).
func nothingSent(err error) bool {
	var pe *PhaseError
	if errors.As(err, &pe) && (pe.Phase == PhaseConnect || pe.Phase == PhaseTLS) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func firstValue(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
