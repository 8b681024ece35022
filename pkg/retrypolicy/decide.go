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
	// says so with retryhttp.ErrMalformedResponse). Never retried: the app
	// gets 502 with outcome upstream-error
	// (docs/retry-semantics.md#unrelayable-responses).
	Malformed
	// Untrusted: the upstream's TLS certificate did not verify (unknown
	// authority, wrong name, expired): retryhttp.ErrUntrustedCertificate.
	// Nothing was sent, but another attempt would meet the same certificate,
	// so it is never retried: outcome upstream-error (docs/tls.md).
	Untrusted
	// Refused: the upstream refused the request's stream unprocessed (HTTP/2
	// REFUSED_STREAM, or a GOAWAY whose last stream ID is below it; a gRPC
	// status of UNAVAILABLE that grpc-go marks as never sent). Like a
	// ConnectFailure nothing reached the application, so it is retried for
	// every method if the body can be produced again, and whatever retryOn
	// says (docs/grpc.md).
	Refused
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
	case Refused:
		return "refused-stream"
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

// Attempt is everything DecideAt needs to know about the attempt that just ended.
type Attempt struct {
	// Number is the 1-based number of the transmission whose result this is; the
	// next retry has retry index Number−1 (so Number 1 → backoff index 0).
	Number int
	// Status of the response; ignored unless Err is NoError.
	Status int
	// GRPC: the attempt was a gRPC call that ended with a status (Err
	// NoError): GRPCStatus is its grpc-status (0 is OK) and Status is
	// ignored; Hint is its grpc-retry-pushback-ms (ParseGRPCPushback).
	GRPC       bool
	GRPCStatus uint32
	// NoRetry: the server asked for no retry at all (a grpc-retry-pushback-ms
	// that is negative or malformed): a retryable status is given back as
	// not-retryable.
	NoRetry bool
	Err     ErrorClass
	// Replayable: the method is replayable or the request carries the idempotency
	// key, AND the body can be sent again. For a gRPC call: its method matches
	// a gRPC pattern of replayableMethods (Policy.GRPCMethodReplayable).
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
	// Deadline of the logical request; the zero time means none. For a gRPC
	// call, the earlier of the policy's and the one its grpc-timeout gives
	// (ParseGRPCTimeout).
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

// Decision is the result of DecideAt. Zero fields are unused for the Action.
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
//	gRPC status 0 (OK)                             Stop success
//	gRPC status not in retryOn.grpcStatusCodes     Stop not-retryable
//	retryable status, NoRetry (pushback < 0)       Stop not-retryable
//	retryable status, not Replayable               Stop not-replayable   (429/503/hints never make it replayable)
//	ConnectFailure, retryOn.connectFailure off     Stop upstream-error
//	ConnectFailure or Refused, not Rewindable      Stop not-replayable
//	Ambiguous Reset, retryOn.resetBeforeHeaders off Stop upstream-error
//	Ambiguous, not Replayable                      Stop not-replayable
//	Nested, or Number >= maxAttempts               Stop exhausted
//	hint h > retryAfter.maxWait                    Defer deferred, NotBefore now+h
//	delay + reserve past Deadline, h alone too     Defer deferred, NotBefore now+h
//	delay + reserve past Deadline, otherwise       Defer deadline-exceeded, NotBefore now+delay
//	otherwise                                      Retry after delay
//
// with local = Backoff.Delay(Number−1, Random), delay = max(local, h + Random·spread)
// when there is a hint h (Retry-After, or grpc-retry-pushback-ms) and delay =
// local otherwise: a server wait is never shortened, jitter is only added
// after it (R2, R3). reserve is perTryTimeout, or 100 ms (minReserve) when
// there is none.
//
// Worked examples (docs/retry-semantics.md#r3): base 1s, max 8s, Equal jitter, 4 attempts:
//
//	server asks 30s, local 8s, 12s of deadline left        → Defer deferred, NotBefore now+30s
//	attempt 1, no hint, Random 0 / 1                        → Retry 0.5s / 1s
//	attempt 2, hint 10s, Random 1, spread 0 (local 2s)      → Retry 10s
//	hint 60s, maxWait 30s                                   → Defer deferred, NotBefore now+60s
//	attempt 4 of 4 (retry index 3 of 3)                     → Stop exhausted
//	503 of a POST without idempotency key                   → Stop not-replayable
//	gRPC UNAVAILABLE, pushback 800ms, Random 0, spread 0    → Retry 0.8s (docs/grpc.md)
//	gRPC UNAVAILABLE, pushback "-1"                         → Stop not-retryable
func (p *Policy) DecideAt(now time.Time, a Attempt) Decision {
	c := &p.cfg
	if outcome, stop := p.verdict(a); stop {
		return Decision{Action: Stop, Outcome: outcome}
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

// verdict applies the rows of DecideAt's table that judge the result alone:
// stop reports that the request ends here with outcome.
func (p *Policy) verdict(a Attempt) (outcome Outcome, stop bool) {
	switch a.Err {
	case Canceled:
		return OutcomeCanceled, true
	case Malformed, Untrusted:
		return OutcomeUpstreamError, true
	case NoError:
		switch {
		case a.GRPC && a.GRPCStatus == 0, !a.GRPC && !p.RetriesStatus(a.Status) && a.Status < 400:
			return OutcomeSuccess, true
		case a.GRPC && !p.RetriesGRPCStatus(a.GRPCStatus), !a.GRPC && !p.RetriesStatus(a.Status), a.NoRetry:
			return OutcomeNotRetryable, true
		case !a.Replayable:
			return OutcomeNotReplayable, true
		}
	case ConnectFailure, Refused:
		if a.Err == ConnectFailure && !p.Retries(RetryConnectFailure) {
			return OutcomeUpstreamError, true
		}
		if !a.Rewindable && !a.Replayable {
			return OutcomeNotReplayable, true
		}
	default: // Ambiguous, and any unknown class is treated as ambiguous
		if a.Reset && !p.Retries(RetryResetBeforeHeaders) {
			return OutcomeUpstreamError, true
		}
		if !a.Replayable {
			return OutcomeNotReplayable, true
		}
	}
	return "", false
}
