package sidecar

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// The data path of a gRPC call that may be retried: what the decision needs
// and what makes a second attempt possible, with the decision itself left to
// a grpcRetrier.
//
//	request   the app's messages are kept as they are sent (replayStream), up
//	          to the policy's maxReplayBodyBytes; past it the call cannot be
//	          sent again (grpcAttempt.Rewindable false)
//	answer    headers and up to grpcHoldBytes of messages are held back
//	          (holdBack) until the trailers arrive; an answer that outgrows
//	          the hold is committed: passed to the app, never retried
//	attempt   each carries x-retry-attempt: N and, when the app sent
//	          grpc-timeout, the time left as its own grpc-timeout; with a
//	          perTryTimeout, min(time left, perTryTimeout), after which the
//	          attempt's stream is reset
//	app gone  the app's reset ends the call at once: nothing more is sent

// grpcRetrier decides the attempts of the gRPC calls of policies. Its
// methods must be safe for concurrent use.
type grpcRetrier interface {
	// Retries reports whether a call to out under pol goes through
	// forwardRetrying: its request kept for replay, each attempt admitted
	// and decided. Every other call is streamed as one attempt.
	Retries(pol *retrypolicy.Policy, out *http.Request) bool
	// Holds reports whether the answers of such a call are held back until
	// their trailers (a status in them may be retried); else an answer is
	// committed from its headers on.
	Holds(pol *retrypolicy.Policy, out *http.Request) bool
	// Admit clears attempt n before it is sent; an error ends the call
	// with the verdict's outcome.
	Admit(ctx context.Context, pol *retrypolicy.Policy, path string, n int, deadline time.Time) (limits.Ticket, grpcVerdict, error)
	// Decide is asked after every attempt whose answer ended before
	// anything of it reached the app.
	Decide(ctx context.Context, pol *retrypolicy.Policy, out *http.Request, a grpcAttempt) grpcVerdict
	// Committed is the outcome of an answer passed to the app as it came
	// (not held, or past the hold), once its trailers came: nothing decided,
	// nothing spent.
	Committed(pol *retrypolicy.Policy, out *http.Request, a grpcAttempt) retrypolicy.Outcome
}

// grpcAttempt is how an attempt ended.
type grpcAttempt struct {
	N int // 1 for the first attempt
	// Err: no status came (a connect failure, a refused or reset stream, an
	// answer cut off before its trailers); Status and Pushback are empty.
	Err error
	// Status is grpc-status ("" for an answer without one, e.g. an HTTP 503
	// from something that is not a gRPC server); Pushback is
	// grpc-retry-pushback-ms as sent ("" when absent).
	Status, Pushback string
	// HTTPStatus is the answer's HTTP status; 0 with Err.
	HTTPStatus int
	// Answer is the answer read to its end, its trailers in, for its
	// rate-limit metadata (pacing); nil with Err.
	Answer *http.Response
	// ConnectFailure: Err is a failed dial or TLS handshake, nothing was
	// sent. Refused: the upstream refused the stream unprocessed
	// (REFUSED_STREAM, or past a GOAWAY), on a cleartext upstream.
	ConnectFailure, Refused bool
	// PerTryTimedOut: the policy's perTryTimeout ended the attempt (the
	// sidecar's timer, or the upstream's for the grpc-timeout it was sent);
	// the server may have acted on the call.
	PerTryTimedOut bool
	// Rewindable: every message the app sent so far is kept, so the call can
	// be sent again.
	Rewindable bool
	// Nested: the app's call carried x-retry-attempt already (another
	// retrying layer sent it). Deadline: the call's, the nearer of the
	// policy's and the app's grpc-timeout.
	Nested   bool
	Deadline time.Time
}

// grpcVerdict is a grpcRetrier's word on an attempt.
type grpcVerdict struct {
	// Again: send the call again after Wait.
	Again bool
	Wait  time.Duration
	// Outcome is x-retry-outcome when the call ends here; NotBefore, if set,
	// is sent as x-retry-not-before (deferred, deadline-exceeded).
	Outcome   retrypolicy.Outcome
	NotBefore time.Time
	// Paced is how long admission kept the attempt in line for a pacing
	// hold (Admit's verdict of an admitted attempt).
	Paced time.Duration
}

// grpcHoldBytes is how much of an answer is held back while its trailers may
// still ask for a retry.
const grpcHoldBytes = 64 << 10

// grpcCall is what holds for every attempt of one call.
type grpcCall struct {
	pol      *retrypolicy.Policy
	start    time.Time
	deadline time.Time
	nested   bool
	hold     bool
	conn     string        // the app connection, for its share of held bytes
	out      *http.Request // the call's upstream request, attempts are made of
	replay   *replayStream
	timeout  bool // the app sent grpc-timeout: each attempt carries the time left
	// held is the answer of the attempt in flight: each attempt's is closed
	// before the next is sent, so one serves them all.
	held heldAnswer
}

// forwardRetrying makes the attempts of a call the retrier may retry and
// relays the last one's answer.
func (g *grpcForwarder) forwardRetrying(w http.ResponseWriter, r, out *http.Request, pol *retrypolicy.Policy) {
	ctx := out.Context()
	c := g.newCall(r, out, pol)
	if c.replay != nil {
		defer c.replay.Close()
	}
	span := g.startSpan(r, out, pol)
	if span != nil {
		defer func() { span.End(answered(w, r)) }()
	}
	for n := 1; ; n++ {
		tk, v, err := g.retry.Admit(ctx, pol, out.URL.Path, n, c.deadline)
		if err != nil {
			if r.Context().Err() == nil {
				g.finish(w, r, ctx, c, nil, grpcAttempt{Err: err}, v, n-1)
			}
			return
		}
		span.Admitted(time.Now(), v.Paced, tk.Waited)
		a, cancel := c.attemptRequest(out, n)
		span.StartAttempt(a.Header, a.URL.Host)
		att, held := g.attempt(a, n, c)
		if held != nil && !held.complete { // outgrew the hold: committed
			if c.replay != nil {
				c.replay.commit()
			}
			defer func() { code, _, _ := answered(w, r); span.EndAttempt(code, "") }()
			defer func() { tk.Release(time.Now()) }() // when the answer ended: the gate measures the attempt
			defer cancel()
			defer held.close()
			g.relayCommitted(w, r, ctx, c, a, att, held) //nolint:bodyclose // held.close closes it
			return
		}
		cancel()
		tk.Release(time.Now())
		span.EndAttempt(attemptSpanStatus(att))
		g.metrics.grpcAttempt(pol.Name(), att)
		v = g.retry.Decide(ctx, pol, a, att)
		if v.Again && att.Rewindable && r.Context().Err() == nil {
			if held != nil {
				held.close()
			}
			span.Wait(time.Now(), v.Wait, waitReason(att))
			if sleepCtx(ctx, v.Wait) {
				continue
			}
			if r.Context().Err() != nil {
				return // the app is gone: nothing more is sent or answered
			}
			v, held = grpcVerdict{Outcome: retrypolicy.OutcomeDeadlineExceeded}, nil
		}
		g.finish(w, r, ctx, c, held, att, v, n)
		return
	}
}

// waitReason is why the wait before the retry after att lasts: the
// pushback when att had a valid one (the wait is at least the server's, as
// after an HTTP Retry-After), else the backoff.
func waitReason(att grpcAttempt) retryotel.Reason {
	if _, err := retrypolicy.ParseGRPCPushback(att.Pushback); att.Pushback != "" && err == nil {
		return retryotel.ReasonRetryAfter
	}
	return retryotel.ReasonBackoff
}

// startSpan starts the span of the call r (out, its upstream form) under
// pol (nil: passed through) when tracing records it; nil otherwise.
func (g *grpcForwarder) startSpan(r, out *http.Request, pol *retrypolicy.Policy) *tracing.GRPCCall {
	if g.tracing == nil {
		return nil
	}
	policy, upstream := "", ""
	if pol != nil {
		upstream = pol.Name()
		if g.policyName != nil {
			policy = g.policyName(pol)
		}
	}
	return g.tracing.StartGRPC(r.Context(), r.Header, out.URL.Path, policy, upstream)
}

// answered is the status, x-retry-outcome and x-retry-attempts the app was
// answered, read from what was written to w once the call ended (in the
// headers of a Trailers-Only answer, else in the trailers); -1 and
// canceled when the app was gone.
func answered(w http.ResponseWriter, r *http.Request) (code int, outcome string, attempts int) {
	if r.Context().Err() != nil {
		return -1, string(retrypolicy.OutcomeCanceled), 0
	}
	h := w.Header()
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		if v := h[http.TrailerPrefix+k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	code = -1
	if n, ok := grpcCode(get("Grpc-Status"), http.StatusOK); ok && get("Grpc-Status") != "" {
		code = int(n)
	}
	attempts, _ = strconv.Atoi(get(retryhttp.HeaderAttempts))
	return code, get(retryhttp.HeaderOutcome), attempts
}

// attemptSpanStatus is the status of an attempt for its span (-1: none came)
// and its error.type: "timeout" when perTryTimeout cut it, else its class
// when no status came.
func attemptSpanStatus(att grpcAttempt) (code int, errorType string) {
	switch {
	case att.PerTryTimedOut && att.Err != nil:
		return -1, "timeout"
	case att.Refused:
		return -1, retrypolicy.Refused.String()
	case att.ConnectFailure:
		return -1, retrypolicy.ConnectFailure.String()
	case att.Err != nil:
		return -1, retrypolicy.Ambiguous.String()
	}
	if n, ok := grpcCode(att.Status, att.HTTPStatus); ok {
		return int(n), ""
	}
	return -1, "malformed"
}

// newCall fixes what holds for every attempt of the call r (out, its
// upstream form) under pol.
func (g *grpcForwarder) newCall(r, out *http.Request, pol *retrypolicy.Policy) *grpcCall {
	c := &grpcCall{pol: pol, start: time.Now(), hold: g.retry.Holds(pol, out), conn: r.RemoteAddr, out: out}
	c.deadline = c.start.Add(pol.Deadline())
	if d, ok := out.Context().Deadline(); ok && d.Before(c.deadline) {
		c.deadline = d
	}
	_, c.nested = r.Header[retryhttp.HeaderAttempt]
	_, c.timeout = r.Header["Grpc-Timeout"]
	if out.Body != nil && pol.MaxAttempts() > 1 {
		c.replay = newReplayStream(out.Body, int(pol.MaxReplayBodyBytes()), g.replayMemory)
	}
	return c
}

// errPerTryTimeout is the cause of an attempt ended by perTryTimeout.
var errPerTryTimeout = errors.New("retry-sidecar: the attempt ran past perTryTimeout")

// attemptRequest is attempt n of the call: its number, the time left, the
// app's messages from the start. With a perTryTimeout shorter than the time
// left, the attempt's context ends after it (cause errPerTryTimeout) and
// its grpc-timeout says so; cancel ends the attempt's stream.
func (c *grpcCall) attemptRequest(out *http.Request, n int) (a *http.Request, cancel context.CancelFunc) {
	ctx, cancel := out.Context(), context.CancelFunc(func() {})
	if pt := c.pol.PerTryTimeout(); pt > 0 && pt < time.Until(c.deadline) {
		ctx, cancel = context.WithTimeoutCause(ctx, pt, errPerTryTimeout)
	}
	a = out.WithContext(ctx)
	a.Header = out.Header.Clone()
	a.Header[retryhttp.HeaderAttempt] = []string{itoa(n)}
	if deadline, ok := ctx.Deadline(); ok && (c.timeout || ctx != out.Context()) {
		a.Header["Grpc-Timeout"] = []string{formatGRPCTimeout(time.Until(deadline))}
	}
	if c.replay != nil {
		a.Body = c.replay.attempt()
	}
	return a, cancel
}

// grpcTimerSlack is how much earlier than the sidecar's perTryTimeout timer
// the upstream's may end an attempt: it counts the grpc-timeout it was sent
// from when the call arrived, and its answer can overtake the sidecar's timer.
const grpcTimerSlack = 10 * time.Millisecond

// endedByPerTryTimeout reports whether perTryTimeout ended the attempt a
// that ended as att: the sidecar's timer fired, or the attempt failed or
// came back DEADLINE_EXCEEDED as that timer was due (the upstream's timer
// for the grpc-timeout it was sent). Never when the call itself ended.
func endedByPerTryTimeout(a, out *http.Request, att grpcAttempt) bool {
	ctx := a.Context()
	if out.Context().Err() != nil {
		return false
	}
	if errors.Is(context.Cause(ctx), errPerTryTimeout) {
		return true
	}
	d, ok := ctx.Deadline()
	if !ok || ctx == out.Context() || time.Until(d) > grpcTimerSlack {
		return false
	}
	return att.Err != nil || att.Status == itoa(grpcDeadlineExceeded)
}

// committedOutcome is the outcome of a call whose last answer was passed to
// the app as it came: counted by its status once its trailers came.
func (g *grpcForwarder) committedOutcome(c *grpcCall, a *http.Request, att grpcAttempt) func(*http.Response) retrypolicy.Outcome {
	return func(resp *http.Response) retrypolicy.Outcome {
		att.Status, att.HTTPStatus, att.Answer = grpcStatusOf(resp), resp.StatusCode, resp
		att.Pushback = pushbackOf(resp)
		o := g.retry.Committed(c.pol, a, att)
		g.metrics.grpcAttempt(c.pol.Name(), att)
		g.metrics.grpcCall(c.pol.Name(), o, time.Since(c.start))
		return o
	}
}

// relayCommitted passes the committed answer held of attempt a (att) to the
// app as it comes. The call and the attempt are counted once: by the status
// in its trailers, or, when the answer ended without them (the app gone, the
// answer cut off upstream), as the attempt with no status it was
// (ambiguous) and the call with the outcome the app was told (canceled when
// it was gone).
func (g *grpcForwarder) relayCommitted(w http.ResponseWriter, r *http.Request, ctx context.Context,
	c *grpcCall, a *http.Request, att grpcAttempt, held *heldAnswer) {
	counted := false
	byStatus := g.committedOutcome(c, a, att) //nolint:bodyclose // it reads an answer the caller closes (held.close)
	g.relay(w, r, ctx, held, func(resp *http.Response) retrypolicy.Outcome {
		counted = true
		return byStatus(resp)
	}, att.N)
	if counted {
		return
	}
	_, outcome, _ := answered(w, r)
	att.Err = errAnswerCutOff
	g.metrics.grpcAttempt(c.pol.Name(), att)
	g.metrics.grpcCall(c.pol.Name(), retrypolicy.Outcome(outcome), time.Since(c.start))
}

// errAnswerCutOff is the end of a committed answer that came without its
// trailers.
var errAnswerCutOff = errors.New("retry-sidecar: the answer ended before its trailers")

// attempt sends a, the n-th attempt, and holds back its answer.
func (g *grpcForwarder) attempt(a *http.Request, n int, c *grpcCall) (grpcAttempt, *heldAnswer) {
	resp, err := g.roundTrip(a) //nolint:bodyclose // holdBack takes the body: the held answer closes it or passes it on
	att := grpcAttempt{N: n, Err: err, Rewindable: c.replay.rewindable(), Nested: c.nested, Deadline: c.deadline}
	if err != nil {
		var pe *retryhttp.PhaseError
		att.ConnectFailure = errors.As(err, &pe) && (pe.Phase == retryhttp.PhaseConnect || pe.Phase == retryhttp.PhaseTLS)
		att.Refused = errors.Is(err, errUnprocessed)
		return c.perTry(a, att), nil
	}
	held := holdBackInto(&c.held, resp, c.hold, g.holds, c.conn)
	att.Rewindable = c.replay.rewindable()
	if !held.complete {
		return att, held
	}
	if held.err != nil {
		att.Err = held.err
		return c.perTry(a, att), held
	}
	att.HTTPStatus, att.Answer = resp.StatusCode, resp
	att.Status = grpcStatusOf(resp)
	att.Pushback = pushbackOf(resp)
	return c.perTry(a, att), held
}

// perTry marks att, an ended attempt a, as ended by perTryTimeout when it
// was: a failure is then errPerTryTimeout, answered DEADLINE_EXCEEDED if it
// is the last.
func (c *grpcCall) perTry(a *http.Request, att grpcAttempt) grpcAttempt {
	if !endedByPerTryTimeout(a, c.out, att) {
		return att
	}
	att.PerTryTimedOut, att.ConnectFailure, att.Refused = true, false, false
	if att.Err != nil {
		att.Err = errPerTryTimeout
	}
	return att
}

// pushbackOf is the grpc-retry-pushback-ms of an answer read to its end: in
// the headers of a Trailers-Only answer, else in the trailers.
func pushbackOf(resp *http.Response) string {
	if v, ok := resp.Header["Grpc-Retry-Pushback-Ms"]; ok && len(v) > 0 {
		return v[0]
	}
	return resp.Trailer.Get("Grpc-Retry-Pushback-Ms")
}

// finish answers the call with its last attempt: the upstream's held answer,
// or the sidecar's own when there was none.
func (g *grpcForwarder) finish(w http.ResponseWriter, r *http.Request, ctx context.Context, c *grpcCall,
	held *heldAnswer, att grpcAttempt, v grpcVerdict, n int) {
	if !v.NotBefore.IsZero() {
		prefix := http.TrailerPrefix
		if held == nil || held.err != nil {
			prefix = "" // a Trailers-Only answer of the sidecar's own
		} else if _, trailersOnly := held.resp.Header["Grpc-Status"]; trailersOnly {
			prefix = ""
		}
		w.Header()[prefix+retryhttp.HeaderNotBefore] = []string{httpdate.Format(v.NotBefore)}
	}
	g.metrics.grpcCall(c.pol.Name(), v.Outcome, time.Since(c.start))
	if held == nil || held.err != nil {
		if held != nil {
			held.close()
		}
		g.answerError(w, r, ctx, c.pol, n, v.Outcome, att.Err)
		return
	}
	defer held.close()
	g.relay(w, r, ctx, held, func(*http.Response) retrypolicy.Outcome { return v.Outcome }, n)
}

// formatGRPCTimeout writes d as a grpc-timeout: whole units, rounded up, in
// the finest unit that fits 8 digits; at least 1n.
//
//	1500ms → 1500000u   90s → 90000000u   3h → 10800000m   0 → 1n
func formatGRPCTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit time.Duration
		c    string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if n := (d + u.unit - 1) / u.unit; n <= 99999999 {
			return itoa(int(n)) + u.c
		}
	}
	return itoa(int((d+time.Hour-1)/time.Hour)) + "H"
}

// replayStream is the app's request stream as the attempts read it: one
// goroutine (pump) reads the app, every attempt reads from the start of what
// was kept. Memory is bounded by limit: while the stream is no longer, all of
// it is kept and any attempt can start over; past it, only the attempt
// reading can go on, and what it has read is dropped. An attempt superseded
// by the next reads nothing more.
type replayStream struct {
	src   io.ReadCloser
	limit int
	// memory is the sidecar's --max-replay-memory: what is kept for replay
	// is reserved from it as it grows, and given back once it is no longer
	// kept; a stream that finds no room is not kept (not rewindable).
	memory   *retryhttp.ReplayMemory
	reserved int64

	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte // the stream from offset base on
	base    int    // > 0 once the stream outgrew limit: no attempt can start over
	end     error  // how src ended (io.EOF or its error), once it did
	gen     int    // the attempt reading now
	pos     int    // how far it has read
	closed  bool
	pumping bool
}

func newReplayStream(src io.ReadCloser, limit int, memory *retryhttp.ReplayMemory) *replayStream {
	s := &replayStream{src: src, limit: max(limit, 0), memory: memory}
	s.cond.L = &s.mu
	return s
}

// rewindable reports whether nothing of the stream was dropped; a nil
// stream (a call without a body) always is.
func (s *replayStream) rewindable() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base == 0 && len(s.buf) <= s.limit
}

// attempt is the body of the next attempt, from the start of the stream.
func (s *replayStream) attempt() io.ReadCloser {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.pos = 0
	s.cond.Broadcast() // the attempt before reads no more
	return &replayReader{s: s, gen: s.gen}
}

// commit gives up every later attempt: what the attempt reading has read is
// dropped from now on.
func (s *replayStream) commit() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = 0
	s.trim()
}

// Close ends the stream: the app's body is closed and no attempt reads more.
func (s *replayStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.release()
	s.mu.Unlock()
	return s.src.Close()
}

// pump reads the app's stream into buf, at most limit bytes ahead of the
// attempt reading, until its end. Its read buffer is pooled: every gRPC call
// has a request stream, most of a few bytes, and a buffer of its own would
// be 16 KiB of garbage per call.
func (s *replayStream) pump() {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	chunk := (*bp)[:replayChunk] // only buf keeps what it reads, copied
	for {
		s.mu.Lock()
		for !s.closed && s.base+len(s.buf)-s.pos >= max(s.limit, len(chunk)) {
			s.cond.Wait()
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		n, err := s.src.Read(chunk)
		s.mu.Lock()
		s.keep(n)
		s.buf = append(s.buf, chunk[:n]...)
		s.trim()
		if err != nil {
			s.end = err
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// keep reserves the memory of n more bytes kept for replay, or gives up
// replay when there is no room; s.mu held.
func (s *replayStream) keep(n int) {
	if s.base > 0 || s.limit == 0 || len(s.buf)+n > s.limit {
		return // not kept for replay: trim drops it as it is read
	}
	if libhooks.TryReserveReplayMemory(s.memory, int64(n)) {
		s.reserved += int64(n)
		return
	}
	s.limit = 0
}

// release gives back the replay memory; s.mu held.
func (s *replayStream) release() {
	libhooks.ReleaseReplayMemory(s.memory, s.reserved)
	s.reserved = 0
}

// trim drops what the attempt reading has read once the stream outgrew
// limit; s.mu held.
func (s *replayStream) trim() {
	if s.base == 0 && len(s.buf) <= s.limit {
		return
	}
	s.release() // what is left is one read's worth, as for a streamed body
	cut := s.pos - s.base
	s.buf = append(s.buf[:0], s.buf[cut:]...)
	s.base = s.pos
}

// replayChunk is one read of the app's request stream.
const replayChunk = 16 << 10

var errSuperseded = errors.New("retry-sidecar: the request stream went to a later attempt")

// replayReader is one attempt's view of a replayStream.
type replayReader struct {
	s      *replayStream
	gen    int
	off    int
	closed bool
}

func (r *replayReader) Read(p []byte) (int, error) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case r.closed || s.closed || r.gen != s.gen:
			return 0, errSuperseded
		case r.off < s.base:
			return 0, errSuperseded // dropped: this attempt cannot start over
		case r.off < s.base+len(s.buf):
			n := copy(p, s.buf[r.off-s.base:])
			r.off += n
			s.pos = r.off
			s.trim()
			s.cond.Broadcast() // room for the pump
			return n, nil
		case s.end != nil:
			return 0, s.end
		}
		if !s.pumping {
			s.pumping = true
			go s.pump()
		}
		s.cond.Wait()
	}
}

// Close ends this attempt's reading; the app's stream stays open for the
// next.
func (r *replayReader) Close() error {
	r.s.mu.Lock()
	r.closed = true
	r.s.cond.Broadcast()
	r.s.mu.Unlock()
	return nil
}
