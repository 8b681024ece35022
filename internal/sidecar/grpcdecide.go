package sidecar

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// grpcPolicyRetrier is the sidecar's grpcRetrier (docs/grpc.md#what-is-retried-when):
// each attempt of a call is admitted by its policy's Limits (grpcadmit.go),
// decided by the policy's DecideAt, the same decision the HTTP path and the
// in-process interceptor (pkg/retrypolicy/retrygrpc) make, and each retry
// spends the outage budget.
type grpcPolicyRetrier struct {
	// random is the jitter's source; nil: math/rand/v2.
	random func() float64
	// observer is told of pacing holds and of calls waiting for them
	// (grpcpacing.go), as the HTTP path's Observer is; nil: nothing.
	observer retryhttp.Observer
	// metrics counts malformed rate-limit metadata; nil: not counted.
	metrics *Metrics
}

// Retries: every call of a policy goes through the retrying path, so that
// admission applies to each attempt even when the policy retries nothing.
func (*grpcPolicyRetrier) Retries(*retrypolicy.Policy, *http.Request) bool { return true }

// Holds reports whether the answer of a call to out may be retried after
// its headers: the policy retries some grpc-status, and the method is one it
// may send again. Any other answer is streamed through at once (a refused
// stream or a failed dial, which come before any answer, are still retried).
func (*grpcPolicyRetrier) Holds(pol *retrypolicy.Policy, out *http.Request) bool {
	return pol.MaxAttempts() > 1 && retriesSomeGRPCStatus(pol) && pol.GRPCMethodReplayable(out.URL.Path)
}

func retriesSomeGRPCStatus(pol *retrypolicy.Policy) bool {
	for code := uint32(1); code <= retrypolicy.MaxGRPCStatus; code++ {
		if pol.RetriesGRPCStatus(code) {
			return true
		}
	}
	return false
}

// Decide turns attempt a into a retrypolicy.Attempt, asks DecideAt, and
// spends the budget on a retry.
func (p *grpcPolicyRetrier) Decide(ctx context.Context, pol *retrypolicy.Policy, out *http.Request, a grpcAttempt) grpcVerdict {
	now := time.Now()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return grpcVerdict{Outcome: retrypolicy.OutcomeDeadlineExceeded}
	case ctx.Err() != nil:
		return grpcVerdict{Outcome: retrypolicy.OutcomeCanceled}
	}
	at, ok := p.attempt(pol, out, a)
	if !ok {
		return grpcVerdict{Outcome: retrypolicy.OutcomeNotRetryable}
	}
	d := pol.DecideAt(now, at)
	p.startHolds(pol, a, now, d)
	if d.Action == retrypolicy.Retry && !pol.Limits().Budget().TryRetryAt(now) {
		return grpcVerdict{Outcome: retrypolicy.OutcomeBudgetExhausted}
	}
	switch d.Action {
	case retrypolicy.Retry:
		return grpcVerdict{Again: true, Wait: d.Delay}
	case retrypolicy.Defer:
		return grpcVerdict{Outcome: d.Outcome, NotBefore: d.NotBefore}
	}
	return grpcVerdict{Outcome: d.Outcome}
}

// Committed is what DecideAt says of an answer that was passed on: its
// outcome when it stops the call (success, not-retryable, not-replayable,
// exhausted), else not-retryable, since what the app has cannot be taken back.
func (p *grpcPolicyRetrier) Committed(pol *retrypolicy.Policy, out *http.Request, a grpcAttempt) retrypolicy.Outcome {
	at, ok := p.attempt(pol, out, a)
	if !ok {
		return retrypolicy.OutcomeNotRetryable
	}
	now := time.Now()
	d := pol.DecideAt(now, at)
	p.startHolds(pol, a, now, d)
	if d.Action == retrypolicy.Stop {
		return d.Outcome
	}
	return retrypolicy.OutcomeNotRetryable
}

// attempt is a as DecideAt reads it; false for an answer whose grpc-status
// cannot be read, which is never retried.
func (p *grpcPolicyRetrier) attempt(pol *retrypolicy.Policy, out *http.Request, a grpcAttempt) (retrypolicy.Attempt, bool) {
	at := retrypolicy.Attempt{Number: a.N, GRPC: true, Rewindable: a.Rewindable, Nested: a.Nested,
		Replayable: a.Rewindable && pol.GRPCMethodReplayable(out.URL.Path), Deadline: a.Deadline, Random: p.rand()}
	switch {
	case a.PerTryTimedOut: // a timeout, not a reset: retried when replayable
		at.Err = retrypolicy.Ambiguous
	case a.Refused:
		at.Err = retrypolicy.Refused
	case a.ConnectFailure:
		at.Err = retrypolicy.ConnectFailure
	case a.Err != nil:
		at.Err, at.Reset = retrypolicy.Ambiguous, true
	default:
		code, ok := grpcCode(a.Status, a.HTTPStatus)
		if !ok {
			return at, false
		}
		at.GRPCStatus = code
		if a.Pushback != "" {
			if d, err := retrypolicy.ParseGRPCPushback(a.Pushback); err != nil {
				at.NoRetry = true // negative or malformed: the server asks for no retry
			} else {
				at.Hint, at.HasHint = retrypolicy.Hint{Delay: d}, true
			}
		}
	}
	return at, true
}

func (p *grpcPolicyRetrier) rand() float64 {
	if p.random != nil {
		return p.random()
	}
	return rand.Float64()
}

// grpcCode is the status of an answer: its grpc-status (one or two ASCII
// digits, up to 16 and the codes gRPC may add up to 99), or, for an answer
// without one, the code gRPC's HTTP/2 protocol gives its HTTP status
// (an HTTP 503 of something that is not a gRPC server is UNAVAILABLE).
// False for a grpc-status that is not a number.
func grpcCode(status string, httpStatus int) (uint32, bool) {
	if status == "" {
		return httpToGRPC(httpStatus), true
	}
	if len(status) > 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(status, 10, 32)
	if err != nil || status[0] == '+' {
		return 0, false
	}
	return uint32(n), true
}

// httpToGRPC maps the HTTP status of an answer without grpc-status as gRPC's
// HTTP/2 protocol does (docs/grpc.md).
func httpToGRPC(httpStatus int) uint32 {
	switch httpStatus {
	case http.StatusOK, http.StatusBadRequest: // a 200 without a status: the answer broke off
		return 13 // INTERNAL
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	}
	return 2 // UNKNOWN
}
