package sidecar

import (
	"context"
	"errors"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Admission of a gRPC attempt is the HTTP path's (docs/grpc.md#what-is-retried-when):
// the same limits.State of the policy (rate limit, concurrency, shared
// quota, outage budget), so gRPC calls and HTTP requests to one upstream
// share its limits. What it refuses, the sidecar answers in gRPC's terms.

var (
	errGRPCShed     = errors.New("retry-sidecar: shed by the upstream's admission limits")
	errGRPCDeferred = errors.New("retry-sidecar: the upstream's quota allows no attempt now")
	errGRPCDeadline = errors.New("retry-sidecar: deadline exceeded")
	errGRPCCanceled = errors.New("retry-sidecar: the call was canceled")
)

// Admit clears attempt n of a call to path whose deadline is deadline: the
// app is still there, the deadline leaves room, the upstream is not held
// (pacing), admission gives a slot in time. On
// refusal the verdict says how the call ends (shed and deferred with the
// time capacity returns) and the error why.
func (p *grpcPolicyRetrier) Admit(ctx context.Context, pol *retrypolicy.Policy, path string, n int, deadline time.Time) (limits.Ticket, grpcVerdict, error) {
	if ctx.Err() != nil {
		return admitCanceled(ctx)
	}
	now := time.Now()
	if !now.Before(deadline) {
		return limits.Ticket{}, grpcVerdict{Outcome: retrypolicy.OutcomeDeadlineExceeded, NotBefore: now}, errGRPCDeadline
	}
	paced, err := p.awaitHold(ctx, pol, path, n, deadline)
	if err != nil {
		return limits.Ticket{}, paced, err // the upstream is held (grpcpacing.go)
	}
	now = time.Now()
	lim := pol.Limits()
	tk, wait, err := lim.Admit(ctx, clock.Real{}, sleepErr, deadline.Sub(now)-pol.Reserve())
	switch {
	case err == nil && ctx.Err() != nil: // admission may have waited
		tk.Release(time.Now())
		return admitCanceled(ctx)
	case err == nil:
		if n == 1 {
			lim.Budget().RecordFirstAt(time.Now())
		}
		return tk, paced, nil
	case errors.Is(err, limits.ErrShed):
		return tk, grpcVerdict{Outcome: retrypolicy.OutcomeShed, NotBefore: time.Now().Add(wait)}, errGRPCShed
	case errors.Is(err, limits.ErrQuotaDenied):
		return tk, grpcVerdict{Outcome: retrypolicy.OutcomeDeferred, NotBefore: time.Now().Add(wait)}, errGRPCDeferred
	}
	return admitCanceled(ctx)
}

// admitCanceled ends a call whose context ended before attempt n: by its
// grpc-timeout (deadline-exceeded) or the app's reset (canceled).
func admitCanceled(ctx context.Context) (limits.Ticket, grpcVerdict, error) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return limits.Ticket{}, grpcVerdict{Outcome: retrypolicy.OutcomeDeadlineExceeded}, errGRPCDeadline
	}
	return limits.Ticket{}, grpcVerdict{Outcome: retrypolicy.OutcomeCanceled}, errGRPCCanceled
}

// sleepErr is sleepCtx as a limits.Sleeper.
func sleepErr(ctx context.Context, d time.Duration) error {
	if !sleepCtx(ctx, d) {
		return ctx.Err()
	}
	return nil
}
