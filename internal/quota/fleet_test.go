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

// podClock is one pod's view of a loaded machine: its timers (lease steps
// and the attempts it serves) run late by up to late, uniformly, and not at
// all while the pod is descheduled (docs/performance.md#shared-quota).
type podClock struct {
	*clocktest.Clock
	late   time.Duration
	rnd    *rand.Rand
	frozen [][2]time.Time // descheduled from, to
}

func (c *podClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	if c.late > 0 {
		d += time.Duration(c.rnd.Int64N(int64(c.late)))
	}
	at := c.Now().Add(d)
	for _, w := range c.frozen {
		if !at.Before(w[0]) && at.Before(w[1]) {
			at = w[1]
		}
	}
	return c.Clock.AfterFunc(at.Sub(c.Now()), f)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fleetOpts is one virtual-clock fleet: pods clients of one quota on one
// Model, pod 0 (the busy pod) with weight skew, the others 1, demand × the
// rate in all, arrivals evenly spaced, for d.
type fleetOpts struct {
	pods, skew int
	demand     float64
	d          time.Duration
	// waitFor: an attempt without a token asks again when TakeAt says, up
	// to waitFor after it arrived (0: it is dropped at once).
	waitFor time.Duration
	// late: every pod's timers run up to late late; busyLate: the busy
	// pod's instead (a process starved of CPU more than the others).
	late, busyLate time.Duration
	// deschedule: the busy pod is descheduled every 5 s (from 3 s on) for a
	// time drawn from [deschedule[0], deschedule[1]).
	deschedule [2]time.Duration
}

// fleetResult is the attempts admitted per pod and in all, the most admitted
// in any window of one second (in 10 ms steps), and the lease operations.
type fleetResult struct {
	admitted  []int
	total     int
	maxWindow int
	ops       uint64
}

// busyFairShare is the busy pod's admitted attempts over its fair share of
// the rate (its demand scaled by rate / fleet demand) for the run.
func (r fleetResult) busyFairShare(o fleetOpts, rate float64) float64 {
	fair := rate * min(o.demand, 1) * float64(o.skew) / float64(o.skew+o.pods-1) * o.d.Seconds()
	return float64(r.admitted[0]) / fair
}

func fleetRun(t testing.TB, spec Spec, o fleetOpts, down func(clk *clocktest.Clock, m *Model)) fleetResult {
	clk := clocktest.NewClock(t0)
	m := NewModel(clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	weights := float64(o.skew + o.pods - 1)
	res := fleetResult{admitted: make([]int, o.pods)}
	const bucket = 10 * time.Millisecond
	perBucket := make([]int, int(o.d/bucket)+1)
	clients := make([]*Client, o.pods)
	rnd := rand.New(rand.NewPCG(2, 5))
	for i := range o.pods {
		pc := &podClock{Clock: clk, late: o.late, rnd: rnd}
		w := 1.0
		if i == 0 {
			w = float64(o.skew)
			if o.busyLate > 0 {
				pc.late = o.busyLate
			}
			if o.deschedule[1] > 0 {
				for at := 3 * time.Second; at < o.d; at += 5 * time.Second {
					span := o.deschedule[0] + time.Duration(rnd.Int64N(int64(o.deschedule[1]-o.deschedule[0])))
					pc.frozen = append(pc.frozen, [2]time.Time{t0.Add(at), t0.Add(at + span)})
				}
			}
		}
		c := New(spec, m, pc, fmt.Sprintf("pod-%d", i), log, Observer{})
		clients[i] = c
		_ = c.Start()
		gap := time.Duration(float64(time.Second) / (spec.RequestsPerSecond * o.demand * w / weights))
		admit := func(now time.Time) {
			res.admitted[i]++
			res.total++
			perBucket[int(now.Sub(t0)/bucket)]++
		}
		var ask func(arrived time.Time)
		ask = func(arrived time.Time) {
			now := clk.Now()
			if (o.waitFor > 0 && now.Sub(arrived) > o.waitFor) || now.Sub(t0) >= o.d {
				return
			}
			wait, v := c.TakeAt(now, now.Sub(arrived))
			if v == admission.QuotaGranted {
				admit(now)
				return
			}
			if o.waitFor > 0 {
				pc.AfterFunc(wait, func() { ask(arrived) })
			}
		}
		var arrive func()
		arrive = func() {
			now := clk.Now()
			if now.Sub(t0) >= o.d {
				return
			}
			if pc.late > 0 || len(pc.frozen) > 0 {
				pc.AfterFunc(0, func() { ask(now) }) // served when the pod runs
			} else {
				ask(now)
			}
			clk.AfterFunc(gap, arrive) // the load generator is not late
		}
		clk.AfterFunc(time.Duration(i)*time.Millisecond, arrive)
	}
	if down != nil {
		down(clk, m)
	}
	for clk.Next() && clk.Now().Sub(t0) < o.d {
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

// The busy pod's share of the rate follows its share of the demand however
// the pods' leases are timed: the store grants a short fleet's pods no more
// than their credit (Entitlement), so a pod that leases often does not take
// what came in for one that leases late. busy is the busy pod's admissions
// over its fair share, for the whole run (a descheduled pod's fair share
// includes the time it did not run).
func TestFleetSharesTheRateByDemand(t *testing.T) {
	const s = time.Second
	const ms = time.Millisecond
	deschedule := [2]time.Duration{500 * ms, 2 * s}
	tests := map[string]struct {
		o                 fleetOpts
		burst             int
		admitted          float64 // least, of the rate
		busyMin, busyMost float64
	}{
		"ten pods with 10:1 skew at 1.2 times the rate":                    {fleetOpts{pods: 10}, 200, 0.98, 0.95, 1.08},
		"fifty pods with 10:1 skew at 1.2 times the rate":                  {fleetOpts{pods: 50}, 200, 0.98, 0.95, 1.08},
		"ten pods whose attempts wait up to a second for the next lease":   {fleetOpts{pods: 10, waitFor: s}, 200, 0.98, 0.95, 1.08},
		"fifty pods whose attempts wait up to a second for the next lease": {fleetOpts{pods: 50, waitFor: s}, 200, 0.98, 0.95, 1.08},
		"ten waiting pods whose steps run up to 80 ms late":                {fleetOpts{pods: 10, waitFor: s, late: 80 * ms}, 200, 0.98, 0.95, 1.08},
		"fifty waiting pods whose steps run up to 80 ms late":              {fleetOpts{pods: 50, waitFor: s, late: 80 * ms}, 200, 0.98, 0.95, 1.08},
		"fifty waiting pods up to 80 ms late, the busy one up to 200 ms":   {fleetOpts{pods: 50, waitFor: s, late: 80 * ms, busyLate: 200 * ms}, 200, 0.98, 0.85, 1.08},
		// A pod that leases every 300 to 600 ms holds tokens for that long:
		// the burst must cover it (docs/quota.md#choosing-burst).
		"fifty waiting pods all up to 500 ms late, burst half a second of the rate": {fleetOpts{pods: 50, waitFor: s, late: 500 * ms}, 500, 0.98, 0.97, 1.08},
		// While the busy pod does not run its demand still counts for the
		// fleet's until it leases again, and the others ask for less.
		"fifty waiting pods, the busy one descheduled 0.5 to 2 s every 5 s": {fleetOpts{pods: 50, waitFor: s, deschedule: deschedule}, 200, 0.96, 0.75, 1.08},
		"fifty waiting pods up to 80 ms late, the busy one descheduled too": {fleetOpts{pods: 50, waitFor: s, late: 80 * ms, deschedule: deschedule}, 200, 0.96, 0.75, 1.08},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := Spec{Name: "q", RequestsPerSecond: 1000, Burst: tc.burst, OnStoreLoss: StoreLossLastShare}
			o := tc.o
			o.skew, o.demand, o.d = 10, 1.2, 60*s
			r := fleetRun(t, spec, o, nil)
			busy := r.busyFairShare(o, spec.RequestsPerSecond)
			t.Logf("admitted %d (%.1f%% of R), busy pod %d (%.1f%% of its fair share), max 1s window %d, ops/s/pod %.1f",
				r.total, float64(r.total)/600, r.admitted[0], 100*busy, r.maxWindow, float64(r.ops)/60/float64(o.pods))
			if least := int(60000 * tc.admitted); r.total < least || r.total > 60000+spec.Burst {
				t.Errorf("admitted %d in 60 s, want %d to 60000 + burst", r.total, least)
			}
			if r.maxWindow > 1000+spec.Burst {
				t.Errorf("max admitted in one second %d, want <= rate + burst = %d", r.maxWindow, 1000+spec.Burst)
			}
			if busy < tc.busyMin || busy > tc.busyMost {
				t.Errorf("busy pod admitted %.1f%% of its fair share, want %.0f%% to %.0f%%", 100*busy, 100*tc.busyMin, 100*tc.busyMost)
			}
			if ops := float64(r.ops) / 60 / float64(o.pods); ops > 10.05 {
				t.Errorf("%.2f store operations per second per pod, want <= 10", ops)
			}
		})
	}
}

// The Model's arithmetic of the script's case in package redisstore
// (TestShortFleetLeavesTheBusyPodsCredit): a quiet pod of a short fleet gets
// what the busy pod is not owed.
func TestModelLeavesTheBusyPodsCredit(t *testing.T) {
	sp := Spec{Name: "credit", RequestsPerSecond: 10, Burst: 20, OnStoreLoss: StoreLossLastShare}
	tests := map[string]struct {
		busyDemand float64
		granted    int64
	}{
		"a quiet pod of a short fleet gets what the busy pod is not owed": {19.98, 10},
		"a pod of a fleet that fits the rate gets what it asks for":       {5, 20},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(t0)
			m := NewModel(clk)
			m.pods["busy"] = modelPod{demand: tc.busyDemand, seen: t0, credit: 50}
			var r LeaseReply
			for _, want := range []int64{0, 20} {
				clk.Advance(time.Millisecond)
				r, _ = m.Lease(t.Context(), sp, LeaseRequest{Pod: "quiet", Demand: 0.02, Want: want})
			}
			if r.Granted != tc.granted || r.Pods != 2 {
				t.Errorf("the quiet pod's second lease = %+v, want %d tokens of 2 pods", r, tc.granted)
			}
		})
	}
}
