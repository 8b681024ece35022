package limits

import (
	"context"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// grantingQuota grants every attempt a send time now, from a gate of
// fleet-wide slots: the quota stage of Admit without a store.
type grantingQuota struct{ slots *Gate }

func (q grantingQuota) TakeAt(now time.Time, _, _ time.Duration) (SendTime, QuotaVerdict) {
	return SendTime{At: now}, QuotaGranted
}
func (q grantingQuota) Untake(SendTime)               {}
func (q grantingQuota) Slots() *Gate                  { return q.slots }
func (q grantingQuota) HoldUntil(time.Time) time.Time { return time.Time{} }
func (q grantingQuota) Hold(time.Time)                {}

// BenchmarkAdmit admits and releases one attempt through every stage that
// never makes it wait: a start token, a send time and a slot of the quota,
// an in-flight slot of the gate. 0 allocations but the start token's
// (rate.Limiter.ReserveN returns a new *rate.Reservation).
func BenchmarkAdmit(b *testing.B) {
	cases := map[string]Config{
		"no limits": {},
		"concurrency and quota": {
			Concurrency: &ConcurrencyConfig{MaxInFlight: 64, MaxQueued: 64, QueueTimeout: time.Second},
			Quota:       grantingQuota{slots: NewGate(ConcurrencyConfig{MaxInFlight: 64, MaxQueued: 64, QueueTimeout: time.Second})},
		},
		"every stage": {
			RateLimit:   &RateLimitConfig{RequestsPerSecond: 1e9, Burst: 1 << 20},
			Concurrency: &ConcurrencyConfig{MaxInFlight: 64, MaxQueued: 64, QueueTimeout: time.Second},
			Quota:       grantingQuota{slots: NewGate(ConcurrencyConfig{MaxInFlight: 64, MaxQueued: 64, QueueTimeout: time.Second})},
		},
	}
	sleep := func(context.Context, time.Duration) error { return nil }
	for name, cfg := range cases {
		b.Run(name, func(b *testing.B) {
			l := New(cfg)
			clk := clock.Real{}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				t, _, err := l.Admit(ctx, clk, sleep, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				t.Release(clk.Now())
			}
		})
	}
}
