package quota

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
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
	// busyNamespace puts the busy pod alone in namespace "busy", the others
	// in "others" (else all are in ""); othersLie makes the store read the
	// others' demand as 1e12.
	busyNamespace, othersLie bool
}

// lyingStore hands the store a demand of 1e12 for every pod of namespace
// "others": what a hostile tenant's pods could report.
type lyingStore struct{ *Model }

func (s lyingStore) Lease(ctx context.Context, spec Spec, r LeaseRequest) (LeaseReply, error) {
	if r.Namespace == "others" {
		r.Demand = 1e12
	}
	return s.Model.Lease(ctx, spec, r)
}

// fleetResult is the attempts admitted per pod and in all, the most admitted
// in any window of one second (in 1 ms steps), the admissions per
// millisecond, and the lease operations.
type fleetResult struct {
	admitted  []int
	total     int
	maxWindow int
	perMs     []int
	ops       uint64
}

// maxIn is the most attempts admitted in any window of length w (in 1 ms
// steps).
func (r fleetResult) maxIn(w time.Duration) int {
	n, most, sum := int(w/time.Millisecond), 0, 0
	for i, c := range r.perMs {
		sum += c
		if i >= n {
			sum -= r.perMs[i-n]
		}
		most = max(most, sum)
	}
	return most
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
	var store Store = m
	if o.othersLie {
		store = lyingStore{m}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	weights := float64(o.skew + o.pods - 1)
	res := &fleetResult{admitted: make([]int, o.pods)}
	res.perMs = make([]int, int(o.d/time.Millisecond)+1)
	clients := make([]*Client, o.pods)
	rnd := rand.New(rand.NewPCG(2, 5))
	for i := range o.pods {
		pc, w := newFleetPodClock(clk, o, rnd, i)
		id := Pod{Name: fmt.Sprintf("pod-%d", i)}
		if o.busyNamespace {
			id.Namespace = map[bool]string{true: "busy", false: "others"}[i == 0]
		}
		c := New(spec, store, pc, id, log, Observer{})
		clients[i] = c
		_ = c.Start()
		p := &fleetPod{i: i, c: c, pc: pc, clk: clk, o: o, res: res,
			gap: time.Duration(float64(time.Second) / (spec.RequestsPerSecond * o.demand * w / weights))}
		clk.AfterFunc(time.Duration(i)*time.Millisecond, p.arrive)
	}
	if down != nil {
		down(clk, m)
	}
	for clk.Next() && clk.Now().Sub(t0) < o.d {
	}
	for i, c := range clients {
		c.Close()
		res.ops += c.Stats().Operations
		if i == 0 && testing.Verbose() {
			t.Logf("busy pod: %+v", c.Stats())
		}
	}
	res.maxWindow = res.maxIn(time.Second)
	return *res
}

// newFleetPodClock is pod i's clock and its weight in the fleet's demand:
// pod 0 is the busy one (o.skew, o.busyLate, o.deschedule), the others
// weigh 1 and are o.late.
func newFleetPodClock(clk *clocktest.Clock, o fleetOpts, rnd *rand.Rand, i int) (pc *podClock, w float64) {
	pc = &podClock{Clock: clk, late: o.late, rnd: rnd}
	w = 1.0
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
	return pc, w
}

// fleetPod is one pod of a fleet run: its arrivals come every gap on the
// shared clock, and each is admitted through its quota client c on its own
// clock pc, counted in res.
type fleetPod struct {
	i   int
	c   *Client
	pc  *podClock
	clk *clocktest.Clock
	o   fleetOpts
	res *fleetResult
	gap time.Duration
}

// admit counts an attempt admitted at now, if within the run.
func (p *fleetPod) admit(now time.Time) {
	if now.Sub(t0) >= p.o.d {
		return
	}
	p.res.admitted[p.i]++
	p.res.total++
	p.res.perMs[int(now.Sub(t0)/time.Millisecond)]++
}

// ask is admission's takeQuota on the pod's clock, from the first
// ask (the pod may serve an arrival late): a send time whose time
// has come starts at once, a later one is waited for (and asked
// again if the pod woke too late for it), and without one the
// attempt waits for the next lease while waitFor allows.
func (p *fleetPod) ask(arrived, first time.Time) {
	now := p.clk.Now()
	if first.IsZero() {
		first = now
	}
	if now.Sub(arrived) > p.o.waitFor || now.Sub(t0) >= p.o.d {
		return
	}
	t, v := p.c.TakeAt(now, now.Sub(first), p.o.waitFor-now.Sub(arrived))
	switch {
	case v == limits.QuotaGranted && !t.At.After(now):
		p.admit(now)
	case v == limits.QuotaGranted:
		p.pc.AfterFunc(t.At.Sub(now), func() {
			if woke := p.clk.Now(); woke.After(t.At.Add(t.Slack)) {
				p.ask(arrived, first)
			} else {
				p.admit(woke)
			}
		})
	case v == limits.QuotaWait && t.At.Sub(arrived) <= p.o.waitFor:
		p.pc.AfterFunc(t.At.Sub(now), func() { p.ask(arrived, first) })
	}
}

// arrive is one arrival of the load generator, which is not late: it is
// asked for at once, or when the pod runs if its clock is late or frozen.
func (p *fleetPod) arrive() {
	now := p.clk.Now()
	if now.Sub(t0) >= p.o.d {
		return
	}
	if p.pc.late > 0 || len(p.pc.frozen) > 0 {
		p.pc.AfterFunc(0, func() { p.ask(now, time.Time{}) }) // served when the pod runs
	} else {
		p.ask(now, time.Time{})
	}
	p.clk.AfterFunc(p.gap, p.arrive) // the load generator is not late
}

// The busy pod's share of the rate follows its share of the demand however
// the pods' leases are timed: the store grants each pod no more than its
// share of the rate for the time since it was last granted (V, at most
// CatchUp back), so a pod that leases often does not take what came in for
// one that leases late. busy is the busy pod's admissions over its fair
// share, for the whole run (a descheduled pod's fair share includes the time
// it did not run).
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
		// Pods that lease every 100 to 600 ms and wake for their send times
		// as late: a send time slept past its lateness ((burst − 1) / rate)
		// is gone, so the burst must cover the timers' lateness (with burst
		// 200 this fleet starts 41 % of the rate, docs/quota.md#choosing-burst).
		"fifty waiting pods all up to 500 ms late, burst half a second of the rate": {fleetOpts{pods: 50, waitFor: s, late: 500 * ms}, 500, 0.98, 0.97, 1.08},
		// While the busy pod does not run, its demand counts for the fleet's
		// for Drawing more, then the others take its share until it leases
		// again.
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

// A partner's ordinary quota, 300/s with burst 10, used by 10 pods whose
// attempts wait up to 250 ms (10:1 skew, demand 1.2 R): the fleet uses at
// least 95 % of the rate and never starts more than R × t + burst in any
// window t. With the tokens of the bucket this was, it used 33.3 % (every
// token counted as on hand, against the burst, from its lease to the next).
func TestASmallBurstQuotaIsUsed(t *testing.T) {
	spec := Spec{Name: "q", RequestsPerSecond: 300, Burst: 10, OnStoreLoss: StoreLossLastShare}
	o := fleetOpts{pods: 10, skew: 10, demand: 1.2, d: 60 * time.Second, waitFor: 250 * time.Millisecond}
	r := fleetRun(t, spec, o, nil)
	t.Logf("admitted %d (%.1f%% of R), busy pod %.1f%% of its fair share, max 1s window %d, ops/s/pod %.1f",
		r.total, float64(r.total)/180, 100*r.busyFairShare(o, spec.RequestsPerSecond), r.maxWindow, float64(r.ops)/60/10)
	if least := 18000 * 95 / 100; r.total < least {
		t.Errorf("admitted %d in 60 s, want at least %d (95 %% of R)", r.total, least)
	}
	for _, w := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 10 * time.Second} {
		if most, bound := r.maxIn(w), int(300*w.Seconds())+spec.Burst; most > bound {
			t.Errorf("admitted %d in a window of %s, want at most R × t + burst = %d", most, w, bound)
		}
	}
}

// Two namespaces on one quota, the fleet short of the rate (demand 1.5 R):
// the namespace of one pod with 0.375 R of demand gets all of it (max-min:
// min(its demand, R ÷ 2)), whatever the other's nine pods report; divided
// by demand, as the store did, it got 0.25 R.
func TestNamespacesShareTheRateMaxMin(t *testing.T) {
	tests := map[string]bool{
		"the other namespace's pods report their demand": false,
		"the other namespace's pods report 1e12":         true,
	}
	for name, lie := range tests {
		t.Run(name, func(t *testing.T) {
			spec := Spec{Name: "q", RequestsPerSecond: 1000, Burst: 200, OnStoreLoss: StoreLossLastShare}
			o := fleetOpts{pods: 10, skew: 3, demand: 1.5, d: 60 * time.Second, waitFor: time.Second,
				busyNamespace: true, othersLie: lie}
			r := fleetRun(t, spec, o, nil)
			busyDemand := 1500.0 * 3 / 12 * 60
			t.Logf("admitted %d (%.1f%% of R), the lone namespace %d (%.1f%% of its demand), max 1s window %d",
				r.total, float64(r.total)/600, r.admitted[0], 100*float64(r.admitted[0])/busyDemand, r.maxWindow)
			if got := float64(r.admitted[0]) / busyDemand; got < 0.97 {
				t.Errorf("the lone namespace got %.1f%% of its demand, want at least 97 %%", 100*got)
			}
			if r.total < 58800 || r.maxWindow > 1000+spec.Burst {
				t.Errorf("admitted %d in 60 s, at most %d in a second; want at least 58800, at most 1200", r.total, r.maxWindow)
			}
		})
	}
}
