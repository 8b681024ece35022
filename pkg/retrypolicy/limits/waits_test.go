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
