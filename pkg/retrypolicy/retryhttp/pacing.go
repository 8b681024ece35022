package retryhttp

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/ratelimitheader"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The Transport's side of quota-aware pacing (docs/pacing.md): before each
// attempt, awaitHold lets the request wait in line for the upstream's hold to
// end, or answers it locally; after each response, startHolds reads the
// rate-limit headers and the decision and holds the upstream.

// awaitHold is called before transmission n. It returns (nil, nil) when the
// attempt may go; otherwise the response or error that ends the request: a
// local 429 when the hold ends too late for the deadline, or the context's
// error when the caller gave up in line.
func (c *call) awaitHold(ctx context.Context, n int) (*http.Response, error) {
	lim := c.p.Limits()
	pc := lim.Pacer()
	if pc == nil {
		return nil, nil
	}
	if q := lim.Quota(); q != nil {
		// A hold another pod drawing on the same quota saw (docs/quota.md).
		now := c.clk.Now()
		if until := q.HoldUntil(now); !until.IsZero() {
			c.holdLocal(pc, now, until, limits.HoldRateLimit)
		}
	}
	if !pc.Active() {
		return nil, nil
	}
	start := c.clk.Now()
	until, queued, err := pc.Wait(ctx, c.clk, c.deadline.Sub(start)-c.p.Reserve())
	switch {
	case errors.Is(err, limits.ErrHeld):
		return c.answerHeld(n, until), nil
	case err != nil:
		return c.fail(retrypolicy.OutcomeCanceled, n-1, err)
	case queued:
		if o := c.t.Observer; o != nil {
			o.Observe(Event{Kind: EventHeld, Context: c.req.Context(), RequestID: c.id, Upstream: c.p.Name(), Method: c.req.Method,
				Path: c.req.URL.Path, Attempt: n - 1, Delay: c.clk.Now().Sub(start)})
		}
	}
	return nil, nil
}

// startHolds holds the upstream after a response received at `received`:
// until its rate-limit headers' reset when they announce remaining 0
// (pacing.rateLimitHeaders), or until Not-Before when the decision deferred it
// (pacing.holdOnDeferral). It notes a malformed rate-limit header in ev.
func (c *call) startHolds(ev *Event, resp *http.Response, received time.Time, d retrypolicy.Decision) {
	cfg := c.p.Pacing()
	if !cfg.Enabled() {
		return
	}
	pc := c.p.Limits().Pacer()
	if pc == nil {
		return
	}
	if cfg.RateLimitHeaders && resp != nil {
		rl := ratelimitheader.Parse(resp.Header, received)
		ev.RateLimitMalformed, ev.RateLimitReason = rl.Malformed, rl.Reason
		if wait, ok := rl.Hold(); ok {
			c.hold(pc, received, received.Add(wait), limits.HoldRateLimit)
		}
	}
	if cfg.HoldOnDeferral && d.Action == retrypolicy.Defer && d.Outcome == retrypolicy.OutcomeDeferred {
		c.hold(pc, received, d.NotBefore, limits.HoldDeferral)
	}
}

func (c *call) hold(pc *limits.Pacer, now, until time.Time, reason limits.HoldReason) {
	if c.holdLocal(pc, now, until, reason) {
		if q := c.p.Limits().Quota(); q != nil {
			q.Hold(until) // the whole fleet holds (docs/quota.md)
		}
	}
}

// holdLocal holds the upstream in this pod; true if the hold started or moved
// later.
func (c *call) holdLocal(pc *limits.Pacer, now, until time.Time, reason limits.HoldReason) bool {
	var notify limits.HoldNotify
	if o := c.t.Observer; o != nil {
		name, id := c.p.Name(), c.id
		notify = func(start bool, until time.Time, reason limits.HoldReason) {
			e := Event{Kind: EventHoldEnd, Upstream: name, NotBefore: until, HoldReason: reason}
			if start {
				e.Kind, e.RequestID = EventHoldStart, id
			}
			o.Observe(e)
		}
	}
	return pc.HoldAt(now, c.clk, until, reason, notify)
}

// answerHeld answers a request the hold does not let through in time, without
// sending it: 429 with Retry-After (seconds until the hold ends, rounded up),
// X-Retry-Not-Before (the hold's end rounded up to the whole second),
// X-Retry-Outcome deferred and X-Retry-Attempts (0 for a first attempt).
func (c *call) answerHeld(n int, until time.Time) *http.Response {
	secs := max(ceilSeconds(until.Sub(c.clk.Now())), 1)
	notBefore := httpdate.Ceil(until)
	resp := c.answerLocally(n, http.StatusTooManyRequests,
		"retry: upstream quota exhausted; request not sent before X-Retry-Not-Before\n", secs,
		HeaderOutcome, string(retrypolicy.OutcomeDeferred), HeaderNotBefore, httpdate.Format(notBefore))
	if o := c.t.Observer; o != nil {
		o.Observe(Event{Kind: EventHeld, Context: c.req.Context(), RequestID: c.id, Upstream: c.p.Name(), Method: c.req.Method,
			Path: c.req.URL.Path, Attempt: n - 1, Outcome: retrypolicy.OutcomeDeferred, NotBefore: notBefore})
	}
	c.observeOutcome(retrypolicy.OutcomeDeferred, n-1, resp.StatusCode, notBefore)
	return resp
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
