package redisstore

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/admission"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// BenchmarkFleetOnRedis runs 50 quota clients in this process against one
// real redis-server on the wall clock: R = 1,000/s, burst 200, 10:1 skew,
// demand 1.2 R, each attempt waiting up to 1 s for a token, 10 s a round
// (go test -bench FleetOnRedis -benchtime 1x). It reports the fleet's
// admissions (% of R) and the busy pod's admissions over its fair share: the
// quota's fairness with real lease timing, without 50 processes competing
// for the CPU (docs/performance.md#shared-quota).
func BenchmarkFleetOnRedis(b *testing.B) {
	srv := redistest.Start(b)
	const pods, skew, rate, demand = 50, 10, 1000.0, 1.2
	const d, deadline = 10 * time.Second, time.Second
	for i := range b.N {
		sp := quota.Spec{Name: fmt.Sprintf("fleet-%d", i), RequestsPerSecond: rate, Burst: 200, OnStoreLoss: quota.StoreLossLastShare}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		admitted := make([]atomic.Int64, pods)
		var wg sync.WaitGroup
		start := time.Now()
		for p := range pods {
			c := quota.New(sp, newStore(b, srv.Addr, "", ""), clock.Real{}, fmt.Sprintf("pod-%d", p), log, quota.Observer{})
			_ = c.Start()
			defer c.Close()
			w := 1.0
			if p == 0 {
				w = skew
			}
			gap := time.Duration(float64(time.Second) / (rate * demand * w / (skew + pods - 1)))
			wg.Go(func() {
				tick := time.NewTicker(gap)
				defer tick.Stop()
				for arrived := range tick.C {
					if arrived.Sub(start) >= d {
						return
					}
					wg.Go(func() {
						for {
							now := time.Now()
							if now.Sub(arrived) > deadline {
								return
							}
							wait, v := c.TakeAt(now, now.Sub(arrived))
							if v == admission.QuotaGranted {
								if now.Sub(start) < d { // the run's length: R × d + burst at most
									admitted[p].Add(1)
								}
								return
							}
							time.Sleep(wait)
						}
					})
				}
			})
		}
		wg.Wait()
		total := int64(0)
		for p := range admitted {
			total += admitted[p].Load()
		}
		fair := rate * skew / (skew + pods - 1) * d.Seconds()
		b.ReportMetric(100*float64(total)/(rate*d.Seconds()), "%R")
		b.ReportMetric(100*float64(admitted[0].Load())/fair, "%busy-fair")
	}
}
