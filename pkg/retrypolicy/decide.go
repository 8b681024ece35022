package retrypolicy

import "time"

// ErrorClass is what became of an attempt that got no response.
type ErrorClass uint8

const (
	// NoError: the attempt got a response; Attempt.Status says which.
	NoError ErrorClass = iota
	// ConnectFailure: the request provably never left (dial refused, DNS failure).
	// Retryable for every method if retryOn.connectFailure is on and the body can
	// be produced again.
	ConnectFailure
	// Ambiguous: a timeout or reset after the request may have been written. The
	// server may have acted on it, so it is retried only if replayable (R4).
	Ambiguous
	// Canceled: the caller's context ended. Never retried (R8).
	Canceled
	// Malformed: the upstream answered with something that is not a relayable
	// HTTP response (a bad head, a status outside 100–999; the upstream client
	// says so with innerclient.ErrMalformedResponse). Never retried: the app
	// gets 502 with outcome upstream-error
	// (docs/retry-semantics.md#unrelayable-responses).
	Malformed
	// Untrusted: the upstream's TLS certificate did not verify (unknown
	// authority, wrong name, expired): innerclient.ErrUntrustedCertificate.
	// Nothing was sent, but another attempt would meet the same certificate,
	// so it is never retried: outcome upstream-error (docs/tls.md).
	Untrusted
)

func (c ErrorClass) String() string {
	switch c {
	case ConnectFailure:
		return "connect-failure"
	case Ambiguous:
		return "ambiguous"
	case Canceled:
		return "canceled"
	case Malformed:
		return "malformed-response"
	case Untrusted:
		return "untrusted-certificate"
	}
	return "none"
}

// Condition is a set of failures without a response that a policy retries
// (Config.RetryOn): one bit per boolean of the API's retryOn, so a new class of
// failure is a new constant here and a row in the API's conversion, not a new
// field through every layer (docs/retry-semantics.md#r4).
type Condition uint8

// The conditions.
const (
	// RetryConnectFailure (retryOn.connectFailure): retry a ConnectFailure, for
	// every method, if the body can be produced again.
	RetryConnectFailure Condition = 1 << iota
	// RetryResetBeforeHeaders (retryOn.resetBeforeHeaders): retry an Ambiguous
	// failure that was a Reset, if the request is replayable.
	RetryResetBeforeHeaders
)

// Attempt is everything Decide needs to know about the attempt that just ended.
type Attempt struct {
	// Number is the 1-based number of the transmission whose result this is; the
	// next retry has retry index Number−1 (so Number 1 → backoff index 0).
	Number int
	// Status of the response; ignored unless Err is NoError.
	Status int
	Err    ErrorClass
	// Replayable: the method is replayable or the request carries the idempotency
	// key, AND the body can be sent again.
	Replayable bool
	// Reset: an Ambiguous failure was the connection reset or closed before the
	// response headers, not a timeout.
	Reset bool
	// Rewindable: the body can be sent again (no body, buffered, GetBody, or never
	// read). Enough for a ConnectFailure, which never reached the server.
	Rewindable bool
	// Nested: the request arrived already carrying X-Retry-Attempt from another
	// retrying layer; this layer must not multiply its attempts (R5).
	Nested bool
	// Hint is the parsed Retry-After of the response, if HasHint.
	Hint    Hint
	HasHint bool
	// Deadline of the logical request; the zero time means none.
	Deadline time.Time
	// Random is a number in [0, 1] for the backoff jitter and the spread added
	// after a hint.
	Random float64
}

// Action is what to do after an attempt.
type Action uint8

const (
	// Stop: give the caller the result of the last attempt, with Decision.Outcome.
	Stop Action = iota
	// Retry: wait Decision.Delay, then transmit again.
	Retry
	// Defer: do not wait and do not retry; give the caller the last response now
	// with Decision.NotBefore, the earliest allowed retry time (Outcome deferred
	// when a server hint is the reason, deadline-exceeded when the local backoff is).
	Defer
)

func (a Action) String() string {
	switch a {
	case Retry:
		return "retry"
	case Defer:
		return "defer"
	}
	return "stop"
}

// Decision is the result of Decide. Zero fields are unused for the Action.
type Decision struct {
	Action    Action
	Outcome   Outcome       // Stop and Defer
	Delay     time.Duration // Retry: the wait before the next transmission, >= 0
	NotBefore time.Time     // Defer: the earliest time a retry is allowed
}

// DecideAt is the retry decision (R2–R5), a pure function of the policy, the
// attempt, and now. It does not allocate. Rules, first match wins:
//
//	last attempt                                   decision
//	Err Canceled                                   Stop canceled
//	Err Malformed                                  Stop upstream-error
//	Err Untrusted (certificate did not verify)     Stop upstream-error
//	status not in retryOn, < 400                   Stop success
//	status not in retryOn, >= 400                  Stop not-retryable
//	retryable status, not Replayable               Stop not-replayable   (429/503/hints never make it replayable)
//	ConnectFailure, retryOn.connectFailure off     Stop upstream-error
//	ConnectFailure, not Rewindable                 Stop not-replayable
//	Ambiguous Reset, retryOn.resetBeforeHeaders off Stop upstream-error
//	Ambiguous, not Replayable                      Stop not-replayable
//	Nested, or Number >= maxAttempts               Stop exhausted
//	hint h > retryAfter.maxWait                    Defer deferred, NotBefore now+h
//	delay + reserve past Deadline, h alone too     Defer deferred, NotBefore now+h
//	delay + reserve past Deadline, otherwise       Defer deadline-exceeded, NotBefore now+delay
//	otherwise                                      Retry after delay
//
// with local = Backoff.Delay(Number−1, Random), delay = max(local, h + Random·spread)
// when there is a hint h and delay = local otherwise: a server wait is never
// shortened, jitter is only added after it (R2, R3). reserve is perTryTimeout, or
// 100 ms (minReserve) when there is none.
//
// Worked examples (docs/retry-semantics.md#r3): base 1s, max 8s, Equal jitter, 4 attempts:
//
//	server asks 30s, local 8s, 12s of deadline left        → Defer deferred, NotBefore now+30s
//	attempt 1, no hint, Random 0 / 1                        → Retry 0.5s / 1s
//	attempt 2, hint 10s, Random 1, spread 0 (local 2s)      → Retry 10s
//	hint 60s, maxWait 30s                                   → Defer deferred, NotBefore now+60s
//	attempt 4 of 4 (retry index 3 of 3)                     → Stop exhausted
//	503 of a POST without idempotency key                   → Stop not-replayable
func (p *Policy) DecideAt(now time.Time, a Attempt) Decision {
	c := &p.cfg
	switch a.Err {
	case Canceled:
		return Decision{Action: Stop, Outcome: OutcomeCanceled}
	case Malformed, Untrusted:
		return Decision{Action: Stop, Outcome: OutcomeUpstreamError}
	case NoError:
		if !p.RetriesStatus(a.Status) {
			if a.Status < 400 {
				return Decision{Action: Stop, Outcome: OutcomeSuccess}
			}
			return Decision{Action: Stop, Outcome: OutcomeNotRetryable}
		}
		if !a.Replayable {
			return Decision{Action: Stop, Outcome: OutcomeNotReplayable}
		}
	case ConnectFailure:
		if !p.Retries(RetryConnectFailure) {
			return Decision{Action: Stop, Outcome: OutcomeUpstreamError}
		}
		if !a.Rewindable && !a.Replayable {
			return Decision{Action: Stop, Outcome: OutcomeNotReplayable}
		}
	default: // Ambiguous, and any unknown class is treated as ambiguous
		if a.Reset && !p.Retries(RetryResetBeforeHeaders) {
			return Decision{Action: Stop, Outcome: OutcomeUpstreamError}
		}
		if !a.Replayable {
			return Decision{Action: Stop, Outcome: OutcomeNotReplayable}
		}
	}
	if a.Nested || a.Number >= c.MaxAttempts {
		return Decision{Action: Stop, Outcome: OutcomeExhausted}
	}
	u := clampUnit(a.Random)
	delay := c.Backoff.Delay(a.Number-1, u)
	hasHint := a.HasHint && a.Err == NoError
	h := max(a.Hint.Delay, 0)
	if hasHint {
		if h > c.RetryAfterMaxWait {
			return Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(h)}
		}
		delay = max(delay, satAdd(h, scale(c.RetryAfterSpread, u)))
	}
	if !a.Deadline.IsZero() {
		remaining := a.Deadline.Sub(now)
		if satAdd(delay, p.reserve) > remaining {
			if hasHint && satAdd(h, p.reserve) > remaining {
				return Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(h)}
			}
			return Decision{Action: Defer, Outcome: OutcomeDeadlineExceeded, NotBefore: now.Add(delay)}
		}
	}
	return Decision{Action: Retry, Delay: delay}
}
