package redisstore

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// BenchmarkFleetOnRedis runs quota clients in this process against one real
// redis-server on the wall clock: 10:1 skew, demand 1.2 R, each attempt
// waiting up to its deadline for a send time, 10 s a round (go test -bench
// FleetOnRedis -benchtime 1x). It reports the fleet's admissions (% of R),
// the most in any second (% of R + burst, counted as the attempts start) and
// the busy pod's admissions over its share of the demand: the quota with
// real lease timing, without processes competing for the CPU
// (docs/performance.md#shared-quota).
func BenchmarkFleetOnRedis(b *testing.B) {
	scenarios := []struct {
		name     string
		pods     int
		rate     float64
		burst    int
		deadline time.Duration
	}{
		{"50 pods, 1000 per s, burst 200, 1 s", 50, 1000, 200, time.Second},
		{"10 pods, 300 per s, burst 10, 250 ms", 10, 300, 10, 250 * time.Millisecond},
	}
	srv := redistest.Start(b)
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			for i := range b.N {
				sp := quota.Spec{Name: fmt.Sprintf("fleet-%d-%d", sc.pods, i), RequestsPerSecond: sc.rate, Burst: sc.burst,
					OnStoreLoss: quota.StoreLossLastShare}
				total, most, busy := fleetOnRedis(b, srv, sp, sc.pods, sc.deadline)
				b.ReportMetric(total, "%R")
				b.ReportMetric(most, "%R+burst/s")
				b.ReportMetric(busy, "%busy-fair")
			}
		})
	}
}

// fleetOnRedis is one round: pods clients of sp for 10 s.
func fleetOnRedis(b *testing.B, srv *redistest.Server, sp quota.Spec, pods int, deadline time.Duration) (total, most, busy float64) {
	const skew, demand, d = 10, 1.2, 10 * time.Second
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	admitted := make([]atomic.Int64, pods)
	perSecond := make([]atomic.Int64, int(d/time.Second))
	var wg sync.WaitGroup
	start := time.Now()
	for p := range pods {
		c := quota.New(sp, newStore(b, srv.Addr, "", ""), clock.Real{}, quota.Pod{Name: fmt.Sprintf("pod-%d", p)}, log, quota.Observer{})
		_ = c.Start()
		defer c.Close()
		w := 1.0
		if p == 0 {
			w = skew
		}
		gap := time.Duration(float64(time.Second) / (sp.RequestsPerSecond * demand * w / float64(skew+pods-1)))
		wg.Go(func() {
			tick := time.NewTicker(gap)
			defer tick.Stop()
			for arrived := range tick.C {
				if arrived.Sub(start) >= d {
					return
				}
				wg.Go(func() {
					at, ok := attempt(c, arrived, deadline)
					if ok && at.Sub(start) < d { // the run's length: R × d + burst at most
						admitted[p].Add(1)
						perSecond[at.Sub(start)/time.Second].Add(1)
					}
				})
			}
		})
	}
	wg.Wait()
	n, top := int64(0), int64(0)
	for p := range admitted {
		n += admitted[p].Load()
	}
	for s := range perSecond {
		top = max(top, perSecond[s].Load())
	}
	fair := sp.RequestsPerSecond * skew / float64(skew+pods-1) * d.Seconds()
	return 100 * float64(n) / (sp.RequestsPerSecond * d.Seconds()), 100 * float64(top) / (sp.RequestsPerSecond + float64(sp.Burst)),
		100 * float64(admitted[0].Load()) / fair
}

// attempt is admission's wait for a send time (takeQuota) on the wall
// clock: the time the attempt starts, or false if its deadline passed.
func attempt(c *quota.Client, arrived time.Time, deadline time.Duration) (time.Time, bool) {
	var first time.Time
	for {
		now := time.Now()
		if now.Sub(arrived) > deadline {
			return now, false
		}
		if first.IsZero() {
			first = now
		}
		t, v := c.TakeAt(now, now.Sub(first), deadline-now.Sub(arrived))
		if v == limits.QuotaWait && t.At.Sub(arrived) > deadline {
			return now, false
		}
		time.Sleep(t.At.Sub(now))
		if woke := time.Now(); v == limits.QuotaGranted && !woke.After(t.At.Add(t.Slack)) {
			return woke, true
		}
	}
}
