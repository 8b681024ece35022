package quota

import (
	"fmt"
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// lateClock runs the clients' timers late by up to late, uniformly, as a
// loaded machine does (docs/performance.md#shared-quota).
type lateClock struct {
	*clocktest.Clock
	late time.Duration
	rnd  *rand.Rand
}

func (c *lateClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Clock.AfterFunc(d+time.Duration(c.rnd.Int64N(int64(c.late))), f)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fleetRun drives pods clients of spec on one Model for d of virtual time:
// pod 0 has weight skew, the others 1, arrivals evenly spaced, demand × the
// rate in all. Attempts that find no token are dropped (no waiting). It
// returns the attempts admitted per pod and the most admitted in any window
// of one second (in 10 ms steps).
type fleetResult struct {
	admitted  []int
	total     int
	maxWindow int
	ops       uint64
}

func fleetRun(t testing.TB, spec Spec, pods, skew int, demand float64, d, waitFor, late time.Duration, down func(clk *clocktest.Clock, m *Model)) fleetResult {
	clk := clocktest.NewClock(t0)
	var clientClk clock.Clock = clk
	if late > 0 {
		clientClk = &lateClock{Clock: clk, late: late, rnd: rand.New(rand.NewPCG(2, 5))}
	}
	m := NewModel(clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	weights := float64(skew + pods - 1)
	res := fleetResult{admitted: make([]int, pods)}
	const bucket = 10 * time.Millisecond
	perBucket := make([]int, int(d/bucket)+1)
	clients := make([]*Client, pods)
	for i := range pods {
		c := New(spec, m, clientClk, fmt.Sprintf("pod-%d", i), log, Observer{})
		clients[i] = c
		_ = c.Start()
		w := 1.0
		if i == 0 {
			w = float64(skew)
		}
		rate := spec.RequestsPerSecond * demand * w / weights
		gap := time.Duration(float64(time.Second) / rate)
		var arrive func()
		arrive = func() {
			now := clk.Now()
			if now.Sub(t0) >= d {
				return
			}
			if waitFor > 0 {
				var ask func(arrived time.Time)
				ask = func(arrived time.Time) {
					now := clk.Now()
					if now.Sub(arrived) > waitFor || now.Sub(t0) >= d {
						return
					}
					wait, v := c.TakeAt(now, now.Sub(arrived))
					if v == admission.QuotaGranted {
						res.admitted[i]++
						res.total++
						perBucket[int(now.Sub(t0)/bucket)]++
						return
					}
					clk.AfterFunc(wait, func() { ask(arrived) })
				}
				ask(now)
			} else if _, v := c.TakeAt(now, 0); v == admission.QuotaGranted {
				res.admitted[i]++
				res.total++
				perBucket[int(now.Sub(t0)/bucket)]++
			}
			clk.AfterFunc(gap, arrive)
		}
		clk.AfterFunc(time.Duration(i)*time.Millisecond, arrive)
	}
	if down != nil {
		down(clk, m)
	}
	for clk.Next() && clk.Now().Sub(t0) < d {
	}
	for _, c := range clients {
		c.Close()
		res.ops += c.Stats().Operations
	}
	win := int(time.Second / bucket)
	sum := 0
	for i, n := range perBucket {
		sum += n
		if i >= win {
			sum -= perBucket[i-win]
		}
		res.maxWindow = max(res.maxWindow, sum)
	}
	return res
}

func TestFleetSharesTheRateByDemand(t *testing.T) {
	tests := map[string]struct {
		pods, skew    int
		waitFor, late time.Duration
		busyMin       float64 // of its fair share
	}{
		"ten pods with 10:1 skew at 1.2 times the rate":                    {pods: 10, skew: 10, busyMin: 0.95},
		"fifty pods with 10:1 skew at 1.2 times the rate":                  {pods: 50, skew: 10, busyMin: 0.95},
		"ten pods whose attempts wait up to a second for the next lease":   {pods: 10, skew: 10, waitFor: time.Second, busyMin: 0.95},
		"fifty pods whose attempts wait up to a second for the next lease": {pods: 50, skew: 10, waitFor: time.Second, busyMin: 0.95},
		"fifty waiting pods whose steps run up to 80 ms late":              {pods: 50, skew: 10, waitFor: time.Second, late: 80 * time.Millisecond, busyMin: 0.7},
		"ten waiting pods whose steps run up to 80 ms late":                {pods: 10, skew: 10, waitFor: time.Second, late: 80 * time.Millisecond, busyMin: 0.7},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := Spec{Name: "q", RequestsPerSecond: 1000, Burst: 200, OnStoreLoss: StoreLossLastShare}
			r := fleetRun(t, spec, tc.pods, tc.skew, 1.2, 60*time.Second, tc.waitFor, tc.late, nil)
			// The busy pod's fair share: its demand scaled by rate / fleet demand.
			busyFair := 1000 * float64(tc.skew) / float64(tc.skew+tc.pods-1) * 60
			t.Logf("admitted %d (%.1f%% of R), busy pod %d (fair %.0f), max 1s window %d, ops/s/pod %.1f",
				r.total, float64(r.total)/600, r.admitted[0], busyFair, r.maxWindow, float64(r.ops)/60/float64(tc.pods))
			if r.total < 60000*98/100 || r.total > 60000+spec.Burst {
				t.Errorf("admitted %d in 60 s, want 98 %% of 60000 to 60000 + burst", r.total)
			}
			if r.maxWindow > 1000+spec.Burst {
				t.Errorf("max admitted in one second %d, want <= rate + burst = %d", r.maxWindow, 1000+spec.Burst)
			}
			// Late steps cost the busy pod part of its share: a short fleet's
			// bucket is empty, and a step that comes late finds less in it;
			// a big ask loses more than a small one (docs/quota.md).
			if got := float64(r.admitted[0]); got < busyFair*tc.busyMin || got > busyFair*1.15 {
				t.Errorf("busy pod admitted %.0f, want its fair share %.0f (× %.2f to × 1.15)", got, busyFair, tc.busyMin)
			}
			if ops := float64(r.ops) / 60 / float64(tc.pods); ops > 10.05 {
				t.Errorf("%.2f store operations per second per pod, want <= 10", ops)
			}
		})
	}
}
