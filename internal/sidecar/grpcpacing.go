package sidecar

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/ratelimitheader"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// gRPC's side of quota-aware pacing (docs/pacing.md, docs/grpc.md#pacing),
// the HTTP path's per attempt, on the same hold of the upstream (its
// Limits().Pacer()), so gRPC calls and HTTP requests to one upstream hold
// each other: before each attempt, awaitHold lets the call wait in line for
// the hold to end, or ends it (the sidecar's UNAVAILABLE, deferred, with
// x-retry-not-before); after each answer, startHolds reads its rate-limit
// metadata (pacing.rateLimitHeaders) and its decision (pacing.holdOnDeferral:
// a pushback past retryAfter.maxWait or the deadline holds the upstream
// until the not-before time, as a Retry-After does for HTTP).

var errGRPCHeld = errors.New("retry-sidecar: the upstream is held (pacing) past the call's deadline")

// awaitHold is called before attempt n (of the call to path): nil when it
// may go (the verdict's Paced: how long it waited in line); errGRPCHeld with the verdict's not-before when the hold ends too
// late for the deadline; the context's error when the app gave up in line.
func (p *grpcPolicyRetrier) awaitHold(ctx context.Context, pol *retrypolicy.Policy, path string, n int, deadline time.Time) (grpcVerdict, error) {
	lim := pol.Limits()
	pc := lim.Pacer()
	if pc == nil {
		return grpcVerdict{}, nil
	}
	if q := lim.Quota(); q != nil {
		// A hold another pod drawing on the same quota saw (docs/quota.md).
		now := time.Now()
		if until := q.HoldUntil(now); !until.IsZero() {
			p.holdLocal(pol, pc, now, until, limits.HoldRateLimit)
		}
	}
	if !pc.Active() {
		return grpcVerdict{}, nil
	}
	start := time.Now()
	until, queued, err := pc.Wait(ctx, clock.Real{}, deadline.Sub(start)-pol.Reserve())
	ev := retryhttp.Event{Kind: retryhttp.EventHeld, Context: ctx, Upstream: pol.Name(), Method: http.MethodPost,
		Path: path, Attempt: n - 1}
	switch {
	case errors.Is(err, limits.ErrHeld):
		ev.Outcome, ev.NotBefore = retrypolicy.OutcomeDeferred, httpdate.Ceil(until)
		p.observe(ev)
		return grpcVerdict{Outcome: retrypolicy.OutcomeDeferred, NotBefore: ev.NotBefore}, errGRPCHeld
	case err != nil:
		_, v, err := admitCanceled(ctx)
		return v, err
	case queued:
		ev.Delay = time.Since(start)
		p.observe(ev)
		return grpcVerdict{Paced: ev.Delay}, nil
	}
	return grpcVerdict{}, nil
}

// startHolds holds the upstream after attempt a, answered at received and
// decided d: until the reset its rate-limit metadata announces with
// remaining 0 (read from the answer's headers and trailers, as gRPC
// metadata may be in either), or until the not-before time of a deferral.
func (p *grpcPolicyRetrier) startHolds(pol *retrypolicy.Policy, a grpcAttempt, received time.Time, d retrypolicy.Decision) {
	cfg := pol.Pacing()
	pc := pol.Limits().Pacer()
	if !cfg.Enabled() || pc == nil {
		return
	}
	if cfg.RateLimitHeaders && a.Answer != nil {
		md := a.Answer.Header
		if len(a.Answer.Trailer) > 0 {
			md = md.Clone()
			for k, vv := range a.Answer.Trailer {
				md[k] = append(md[k], vv...)
			}
		}
		rl := ratelimitheader.Parse(md, received) // a malformed field holds nothing
		if rl.Malformed != "" {
			p.metrics.rateLimitMalformed(pol.Name(), rl.Malformed, rl.Reason)
		}
		if wait, ok := rl.Hold(); ok {
			p.hold(pol, pc, received, received.Add(wait), limits.HoldRateLimit)
		}
	}
	if cfg.HoldOnDeferral && d.Action == retrypolicy.Defer && d.Outcome == retrypolicy.OutcomeDeferred {
		p.hold(pol, pc, received, d.NotBefore, limits.HoldDeferral)
	}
}

func (p *grpcPolicyRetrier) hold(pol *retrypolicy.Policy, pc *limits.Pacer, now, until time.Time, reason limits.HoldReason) {
	if p.holdLocal(pol, pc, now, until, reason) {
		if q := pol.Limits().Quota(); q != nil {
			q.Hold(until) // the whole fleet holds (docs/quota.md)
		}
	}
}

// holdLocal holds the upstream in this pod; true if the hold started or
// moved later. Its start and end are told to the observer (logs, metrics).
func (p *grpcPolicyRetrier) holdLocal(pol *retrypolicy.Policy, pc *limits.Pacer, now, until time.Time, reason limits.HoldReason) bool {
	var notify limits.HoldNotify
	if p.observer != nil {
		name := pol.Name()
		notify = func(start bool, until time.Time, reason limits.HoldReason) {
			e := retryhttp.Event{Kind: retryhttp.EventHoldEnd, Upstream: name, NotBefore: until, HoldReason: reason}
			if start {
				e.Kind = retryhttp.EventHoldStart
			}
			p.observer.Observe(e)
		}
	}
	return pc.HoldAt(now, clock.Real{}, until, reason, notify)
}

func (p *grpcPolicyRetrier) observe(e retryhttp.Event) {
	if p.observer != nil {
		p.observer.Observe(e)
	}
}
