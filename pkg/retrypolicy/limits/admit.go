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
	var taken stages
	defer taken.rollback() // unless admitted
	var waited Waits
	if lim := parts.limiter; lim != nil {
		now := clk.Now()
		r := lim.ReserveN(now, 1)
		if !r.OK() {
			return Ticket{}, time.Second, ErrShed
		}
		taken.token, taken.tokenAt = r, now
		if d := r.DelayFrom(now); d > 0 {
			if d > maxWait {
				return Ticket{}, d, ErrShed
			}
			l.pacing.Add(1)
			err := sleep(ctx, d)
			l.pacing.Add(-1)
			if err != nil {
				taken.tokenAt = clk.Now()
				return Ticket{}, 0, err
			}
			maxWait -= d
			taken.tokenAt = now.Add(d)
			waited.RateLimit = d
		}
	}
	if q := parts.quota; q != nil {
		l.pacing.Add(1)
		t, spent, ra, err := takeQuota(ctx, q, clk, sleep, clk.Now(), maxWait)
		l.pacing.Add(-1)
		if err != nil {
			return Ticket{}, ra, err
		}
		taken.quota, taken.sendTime = q, t
		maxWait -= spent
		waited.Quota = spent
	}
	if gate := parts.gate; gate != nil {
		d, err := gate.Acquire(ctx, clk, maxWait)
		if err != nil {
			return Ticket{}, d, err
		}
		taken.gate = gate
		maxWait -= d
		waited.Queue = d
	}
	if taken.quota != nil {
		if slots := taken.quota.Slots(); slots != nil {
			d, err := slots.Acquire(ctx, clk, maxWait)
			if err != nil {
				return Ticket{}, d, err
			}
			taken.slots = slots
			waited.Quota += d
		}
	}
	t := Ticket{Waited: waited, lim: l, gate: taken.gate, slots: taken.slots}
	taken = stages{} // admitted: nothing to give back
	l.inFlight.Add(1)
	if t.gate != nil || t.slots != nil {
		t.start = clk.Now()
	}
	return t, 0, nil
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
