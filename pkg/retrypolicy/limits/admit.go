package limits

import (
	"context"
	"time"

	"golang.org/x/time/rate"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Sleeper waits d, returning at once with the context's error if ctx ends first.
type Sleeper func(ctx context.Context, d time.Duration) error

// Ticket is an admitted attempt. Release it exactly once when the attempt really
// ends (its response body closed, or its error returned). The zero Ticket holds
// nothing.
type Ticket struct {
	// Waited is how long admission made the attempt wait, and for what.
	Waited Waits

	lim   *State
	gate  *Gate
	slots *Gate // of the quota
	start time.Time
}

// Waits are the waits of one admission, by the gate that made the attempt
// wait (docs/observability.md#tracing names them retry.reason rate_limit,
// quota and queue). Each is measured on the clock Admit was given.
type Waits struct {
	RateLimit time.Duration // for a start token of the rate limiter
	Quota     time.Duration // for a token, then a fleet-wide slot, of the shared quota
	Queue     time.Duration // in the concurrency gate's queue
}

// Release returns the in-flight slots, if the attempt held any.
func (t Ticket) Release(now time.Time) {
	if t.lim != nil {
		t.lim.inFlight.Add(-1)
	}
	if t.gate != nil {
		t.gate.Release(now.Sub(t.start))
	}
	if t.slots != nil {
		t.slots.Release(now.Sub(t.start))
	}
}

// Admit asks permission to start one attempt (R7). maxWait is how long the
// caller can afford to wait in total (its remaining deadline minus the attempt's
// reserve). First a start token: if the limiter can give one within maxWait the
// caller sleeps until then (sleep ends at once on cancellation), else it is shed
// with the exact time the token would come. Then a send time of the shared
// quota, if any (docs/quota.md): taken locally, waiting for it, or for the
// next lease, while maxWait allows. Then an in-flight slot from the Gate, and
// one of the quota's fleet-wide slots. It returns the Ticket, whose Waited
// says which of them made the attempt wait and how long; or ErrShed with the
// time until capacity returns (for the 503's Retry-After), ErrQuotaDenied with
// the time until the request may be sent again, or the context's error. An
// attempt refused at any stage gives back what the stages before it took.
//
// The rate wait needs no queue of its own: every waiter has reserved a distinct
// future token, so at most burst + rate·maxWait callers can be waiting, and a
// caller that would wait past its deadline is shed, not queued.
func (l *State) Admit(ctx context.Context, clk clock.Clock, sleep Sleeper, maxWait time.Duration) (Ticket, time.Duration, error) {
	parts := l.parts.Load()
	a := admission{l: l, ctx: ctx, clk: clk, maxWait: maxWait}
	defer a.taken.rollback() // unless admitted: gives back what the stages took
	if ra, err := a.startToken(parts, sleep); err != nil {
		return Ticket{}, ra, err
	}
	if ra, err := a.sendTime(parts, sleep); err != nil {
		return Ticket{}, ra, err
	}
	if ra, err := a.inFlightSlot(parts); err != nil {
		return Ticket{}, ra, err
	}
	if ra, err := a.fleetSlot(); err != nil {
		return Ticket{}, ra, err
	}
	t := Ticket{Waited: a.waited, lim: l, gate: a.taken.gate, slots: a.taken.slots}
	a.taken = stages{} // admitted: nothing to give back
	l.inFlight.Add(1)
	if t.gate != nil || t.slots != nil {
		t.start = clk.Now()
	}
	return t, 0, nil
}

// admission is one call of Admit: what its stages took, what is left of
// maxWait and the waits so far. (The Sleeper is passed to the stages that
// sleep, not kept here: kept, it would escape, and the caller's closure with it.) Each stage takes its part or returns the
// error and retry-after of Admit, leaving what it took in taken.
type admission struct {
	l       *State
	ctx     context.Context
	clk     clock.Clock
	maxWait time.Duration
	waited  Waits
	taken   stages
}

// startToken takes a start token of the rate limiter, sleeping until it is
// due, or sheds the attempt with the time the token would come.
func (a *admission) startToken(parts *limitParts, sleep Sleeper) (time.Duration, error) {
	lim := parts.limiter
	if lim == nil {
		return 0, nil
	}
	now := a.clk.Now()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, ErrShed
	}
	a.taken.token, a.taken.tokenAt = r, now
	d := r.DelayFrom(now)
	if d <= 0 {
		return 0, nil
	}
	if d > a.maxWait {
		return d, ErrShed
	}
	a.l.pacing.Add(1)
	err := sleep(a.ctx, d)
	a.l.pacing.Add(-1)
	if err != nil {
		a.taken.tokenAt = a.clk.Now()
		return 0, err
	}
	a.maxWait -= d
	a.taken.tokenAt = now.Add(d)
	a.waited.RateLimit = d
	return 0, nil
}

// sendTime takes a send time of the shared quota, waiting for it (or for the
// next lease) while maxWait allows.
func (a *admission) sendTime(parts *limitParts, sleep Sleeper) (time.Duration, error) {
	q := parts.quota
	if q == nil {
		return 0, nil
	}
	a.l.pacing.Add(1)
	t, spent, ra, err := takeQuota(a.ctx, q, a.clk, sleep, a.clk.Now(), a.maxWait)
	a.l.pacing.Add(-1)
	if err != nil {
		return ra, err
	}
	a.taken.quota, a.taken.sendTime = q, t
	a.maxWait -= spent
	a.waited.Quota = spent
	return 0, nil
}

// inFlightSlot takes a slot of the concurrency gate, queueing for it.
func (a *admission) inFlightSlot(parts *limitParts) (time.Duration, error) {
	gate := parts.gate
	if gate == nil {
		return 0, nil
	}
	d, err := gate.Acquire(a.ctx, a.clk, a.maxWait)
	if err != nil {
		return d, err
	}
	a.taken.gate = gate
	a.maxWait -= d
	a.waited.Queue = d
	return 0, nil
}

// fleetSlot takes one of the shared quota's fleet-wide slots, if it has any.
func (a *admission) fleetSlot() (time.Duration, error) {
	if a.taken.quota == nil {
		return 0, nil
	}
	slots := a.taken.quota.Slots()
	if slots == nil {
		return 0, nil
	}
	d, err := slots.Acquire(a.ctx, a.clk, a.maxWait)
	if err != nil {
		return d, err
	}
	a.taken.slots = slots
	a.waited.Quota += d
	return 0, nil
}

// stages is what Admit took so far for one attempt: a start token (due at
// tokenAt), a send time of the quota, a slot of the gate and one of the
// quota's fleet-wide slots.
type stages struct {
	token    *rate.Reservation
	tokenAt  time.Time
	quota    Quota
	sendTime SendTime
	gate     *Gate
	slots    *Gate
}

// rollback gives back what an attempt that never started took. Cancelling
// the start token as of the time it was due restores it even after the
// wait for it.
func (s *stages) rollback() {
	if s.slots != nil {
		s.slots.Release(0)
	}
	if s.gate != nil {
		s.gate.Release(0)
	}
	if s.quota != nil {
		s.quota.Untake(s.sendTime)
	}
	if s.token != nil {
		s.token.CancelAt(s.tokenAt)
	}
}
