package limits

import (
	"context"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// Admit says which gate made an attempt wait, and how long, as data
// (Ticket.Waited): the traces' retry.reason comes from it, never from the
// length of a wait.
func TestAdmitNamesEachWaitByItsGate(t *testing.T) {
	const held = 40 * time.Millisecond // how long a busy slot stays taken
	granted, lease := answer{v: QuotaGranted}, answer{v: QuotaWait, wait: 100 * time.Millisecond}
	tests := map[string]struct {
		rateSpent bool     // the rate limit's one token is spent: the next is 100 ms away
		quota     []answer // nil: no shared quota
		gateBusy  bool     // the concurrency gate's one slot is taken
		slotsBusy bool     // the quota's one fleet-wide slot is taken
		want      Waits
	}{
		"every gate open admits without a wait": {quota: []answer{granted}},
		"a spent start token is waited for as rate limit": {rateSpent: true,
			want: Waits{RateLimit: 100 * time.Millisecond}},
		"no send time on hand is waited for as quota": {quota: []answer{lease, granted},
			want: Waits{Quota: 100 * time.Millisecond}},
		"a send time ahead is waited for as quota": {quota: []answer{{v: QuotaGranted, wait: 30 * time.Millisecond}},
			want: Waits{Quota: 30 * time.Millisecond}},
		"a busy fleet-wide slot is waited for as quota": {quota: []answer{granted}, slotsBusy: true,
			want: Waits{Quota: held}},
		"a busy concurrency slot is waited for in the queue": {gateBusy: true,
			want: Waits{Queue: held}},
		"each gate in turn adds its own wait": {rateSpent: true, quota: []answer{lease, granted}, gateBusy: true,
			want: Waits{RateLimit: 100 * time.Millisecond, Quota: 100 * time.Millisecond, Queue: held}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(now)
			one := ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 1, QueueTimeout: time.Minute}
			s := Config{RateLimit: &RateLimitConfig{RequestsPerSecond: 10, Burst: 1}, Concurrency: &one}
			var q *scriptedQuota
			if tc.quota != nil {
				q = &scriptedQuota{answers: tc.quota, slots: NewGate(one)}
				s.Quota = q
			}
			l := New(s)
			if tc.rateSpent {
				l.Limiter().ReserveN(clk.Now(), 1)
			}
			if tc.gateBusy && !l.Gate().TryAcquire() || tc.slotsBusy && !q.slots.TryAcquire() {
				t.Fatal("a slot could not be taken")
			}
			sleep := func(_ context.Context, d time.Duration) error { clk.Advance(d); return nil }
			admitted := make(chan Ticket, 1)
			go func() {
				tk, _, err := l.Admit(context.Background(), clk, sleep, time.Hour)
				if err != nil {
					t.Errorf("Admit: %v", err)
				}
				admitted <- tk
			}()
			for _, g := range []struct {
				busy bool
				gate func() *Gate
			}{{tc.gateBusy, l.Gate}, {tc.slotsBusy, func() *Gate { return q.slots }}} {
				if g.busy {
					clocktest.WaitFor(t, "a queued waiter", func() bool { return g.gate().Queued() == 1 })
					clk.Advance(held)
					g.gate().Release(held)
				}
			}
			if got := (<-admitted).Waited; got != tc.want {
				t.Errorf("Waited = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// slowClock reads the time only after a real pause, as a descheduled
// goroutine would: a wait measured from a read made after the waiter became
// visible would miss what happened meanwhile.
type slowClock struct{ *clocktest.Clock }

func (c slowClock) Now() time.Time { time.Sleep(5 * time.Millisecond); return c.Clock.Now() }

// The queue wait starts when the caller queues, not when its goroutine next
// runs: a Release as soon as Queued reports the waiter still counts the
// whole wait (it read 0 in 1 CI run, under load, when the time was read after
// the waiter became visible).
func TestAQueueWaitCountsFromTheMomentTheCallerQueued(t *testing.T) {
	const held = 40 * time.Millisecond
	clk := slowClock{clocktest.NewClock(now)}
	g := NewGate(ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 1, QueueTimeout: time.Minute})
	if !g.TryAcquire() {
		t.Fatal("the one slot could not be taken")
	}
	waited := make(chan time.Duration, 1)
	go func() {
		d, err := g.Acquire(context.Background(), clk, time.Hour)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		waited <- d
	}()
	clocktest.WaitFor(t, "a queued waiter", func() bool { return g.Queued() == 1 })
	clk.Advance(held)
	g.Release(held)
	if got := <-waited; got != held {
		t.Errorf("queue wait = %v, want %v", got, held)
	}
}
