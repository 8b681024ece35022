package quota

import (
	"fmt"
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

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

func fleetRun(t testing.TB, spec Spec, pods, skew int, demand float64, d, waitFor time.Duration, down func(clk *clocktest.Clock, m *Model)) fleetResult {
	clk := clocktest.NewClock(t0)
	m := NewModel(clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	weights := float64(skew + pods - 1)
	res := fleetResult{admitted: make([]int, pods)}
	const bucket = 10 * time.Millisecond
	perBucket := make([]int, int(d/bucket)+1)
	clients := make([]*Client, pods)
	for i := range pods {
		c := New(spec, m, clk, fmt.Sprintf("pod-%d", i), log, Observer{})
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
		pods, skew int
		waitFor    time.Duration
	}{
		"ten pods with 10:1 skew at 1.2 times the rate":                    {pods: 10, skew: 10},
		"fifty pods with 10:1 skew at 1.2 times the rate":                  {pods: 50, skew: 10},
		"ten pods whose attempts wait up to a second for the next lease":   {pods: 10, skew: 10, waitFor: time.Second},
		"fifty pods whose attempts wait up to a second for the next lease": {pods: 50, skew: 10, waitFor: time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := Spec{Name: "q", RequestsPerSecond: 1000, Burst: 200, OnStoreLoss: StoreLossLastShare}
			r := fleetRun(t, spec, tc.pods, tc.skew, 1.2, 60*time.Second, tc.waitFor, nil)
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
			if got := float64(r.admitted[0]); got < busyFair*0.95 || got > busyFair*1.15 {
				t.Errorf("busy pod admitted %.0f, want its fair share %.0f (-5 %%, +15 %%)", got, busyFair)
			}
			if ops := float64(r.ops) / 60 / float64(tc.pods); ops > 10.05 {
				t.Errorf("%.2f store operations per second per pod, want <= 10", ops)
			}
		})
	}
}
