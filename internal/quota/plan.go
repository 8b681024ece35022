package quota

import (
	"math"
	"time"
)

// The pure arithmetic of a pod's lease: how much to ask for, and what to
// admit when the store is lost. Kept free of state and clocks so the Client,
// the rehearsal and the tests share it.

// Interval is the time between two lease operations of a pod under demand:
// at most 10 store operations per second per pod (docs/quota.md).
const Interval = 100 * time.Millisecond

// IdleInterval is the time between two lease operations of a pod without
// demand: it keeps its slots and its place in the fleet's demand alive.
const IdleInterval = time.Second

// LeaseTTL is how long the store keeps a pod's tokens, slots and demand
// after its last lease operation: a pod killed holding slots gives them back
// within it (docs/quota.md), and a pod that lost the store stops spending the
// tokens it holds after it.
const LeaseTTL = 5 * time.Second

// Lateness folds the time dt between two steps into gap and dev, the
// smoothed time between steps and its mean deviation (as TCP smooths its
// round-trip time, weights 1/4): what Horizon leases ahead for.
//
//	gap    dev   dt     gap', dev'
//	0      0     100ms  100ms, 0       (the first gap seen is taken whole)
//	100ms  0     180ms  120ms, 20ms
//	120ms  20ms  100ms  115ms, 20ms
func Lateness(gap, dev, dt time.Duration) (time.Duration, time.Duration) {
	if gap == 0 {
		return dt, 0
	}
	diff := dt - gap
	if diff < 0 {
		diff = -diff
	}
	return gap + (dt-gap)/4, dev + (diff-dev)/4
}

// Horizon is the time a pod leases for: until its next step lands, as the
// steps really come on this machine (the smoothed gap between them; a loaded
// machine runs timers late, and a pod that leased for Interval alone ran dry
// before its next step while its share of the rate overflowed the bucket,
// docs/performance.md#shared-quota). While the fleet's demand fits the rate
// (not short), it leases further ahead by twice the gap's deviation and one
// more Interval, so a late step, or arrivals out of phase with the steps,
// find tokens still on hand (leasing for the gap alone, 1.4 % of the
// attempts on a quota far above its demand waited up to 50 ms for a lease);
// a short fleet's pods lease for the gap alone, so their asks add up to about
// the rate and each gets its share rather than whatever the pod that steps
// first takes. The gap counts as at least Interval and at most 3 × Interval.
//
//	gap    dev   short  horizon
//	100ms  0     no     200ms
//	120ms  20ms  no     260ms
//	120ms  20ms  yes    120ms
//	200ms  80ms  no     400ms (at most 3 × Interval, + Interval)
func Horizon(gap, dev time.Duration, short bool) time.Duration {
	if short {
		return min(max(gap, Interval), 3*Interval)
	}
	return min(max(gap+2*dev, Interval), 3*Interval) + Interval
}

// margin is how much more than its fair share of the next interval a pod
// asks for: the store grants at most what it has, so asking a little more
// leaves no token unused in the bucket (arrivals are bursty, steps late on a
// loaded machine) while every pod still gets about its share; 1.05 left 2 to
// 8 % of the quota unused on a loaded machine (docs/performance.md#shared-quota).
const margin = 1.15

// Want is the number of tokens a pod asks for in one lease operation: its
// fair share of the quota's rate over the next interval, with a margin, less
// the tokens it holds. Its fair share is its own demand when the
// fleet's demand fits the rate, else its demand scaled down by rate / fleet
// demand, so that the fleet's asks add up to about the rate and a busy pod
// gets as much of the quota as its demand is of the fleet's. A share of less
// than one token per interval is carried over (carry in, carry out) rather
// than rounded up, so a slow pod does not sit on tokens the others need.
//
//	demand  fleet  rate   interval  held  carry  want, carry
//	600/s   1200/s 1000/s 100ms     0     0      57, 0.5     (500·0.1·1.15 = 57.5)
//	600/s   1200/s 1000/s 100ms     25    0      32, 0.5
//	1/s     10/s   1.5/s  100ms     0     0      0, 0.01725  (0.15·0.1·1.15)
//	1/s     10/s   1.5/s  100ms     0     0.99   1, 0.00725
//	10/s    10/s   1000/s 100ms     0     0      1, 0.15     (a first attempt after idle)
//	1/s     10/s   1000/s 100ms     0     0      1, 0        (a roomy quota: a token on hand)
//
// While the fleet's demand fits the rate nobody needs the fraction: a pod
// with less than a token of share per interval and none on hand asks for one,
// so its next attempt finds a token rather than waiting for a lease (on a
// quota far above its demand 4.7 % of the attempts waited, up to 50 ms,
// docs/performance.md#shared-quota).
func Want(demand, fleetDemand, rate float64, interval time.Duration, held int64, carry float64) (int64, float64) {
	share := demand
	short := fleetDemand > rate && fleetDemand > 0
	if short {
		share = demand * rate / fleetDemand
	}
	w := share*interval.Seconds()*margin - float64(held) + carry
	if w <= 0 {
		return 0, 0
	}
	want := int64(math.Floor(w))
	if want == 0 && held == 0 && !short {
		return 1, 0
	}
	return want, w - float64(want)
}

// Entitlement is a pod's credit while the fleet is short (its demand is
// above the rate): it grows at the pod's share of the rate (rate × demand /
// fleet demand) for the time since its last lease operation (at most
// IdleInterval of it), up to one IdleInterval of that share or one token.
// The store grants such a pod no more than its credit plus one token (which
// it then owes: credit down to −1, so a share below a token per lease is not
// starved), or the tokens the other pods' credits leave, whichever is more.
// Without it a short fleet's bucket went to whoever leased first: with 50
// pods whose leases ran late the busy pod got 76–89 % of its share, and with
// punctual ones 115 % (docs/performance.md#shared-quota). capped is false
// when the fleet is not short or the pod is new (elapsed < 0): it then takes
// what it asks for.
//
//	credit  demand  fleet   rate    elapsed  credit', capped
//	0       600     1200    1000    100ms    50, yes
//	2       20      1200    1000    100ms    3.67, yes
//	0       20      1200    1000    5s       16.7, yes   (at most 1 s of the share)
//	0.95    1       10      1.5     1s       1, yes      (at most 1 s of 0.15/s, at least 1)
//	0       1       10      1.5     100ms    0.015, yes
//	7       600     900     1000    100ms    0, no       (the fleet fits the rate)
func Entitlement(credit, demand, fleetDemand, rate float64, elapsed time.Duration) (float64, bool) {
	if fleetDemand <= rate || elapsed < 0 {
		return 0, false
	}
	share := rate * demand / fleetDemand
	most := max(share*IdleInterval.Seconds(), 1)
	return min(credit+share*min(elapsed, IdleInterval).Seconds(), most), true
}

// Share is the fraction of the fleet's demand that is this pod's: what
// onStoreLoss LastShare admits of the quota's rate while the store is lost.
// Without a known fleet demand it is 1/pods.
func Share(demand, fleetDemand float64, pods int) float64 {
	if fleetDemand > 0 && demand <= fleetDemand {
		return demand / fleetDemand
	}
	return 1 / float64(max(pods, 1))
}

// Fallback is what a pod admits on its own while the store is lost: rate
// tokens per second with burst, or nothing at all (Deny, or a pod that never
// reached the store: it knows neither its share nor the number of pods).
type Fallback struct {
	Deny  bool
	Rate  float64
	Burst int
}

// FallbackFor is the fallback of mode for a pod with the given last-known
// demand, fleet demand and number of pods (pods 0: the store was never
// reached).
//
//	mode       demand fleet  pods  quota 1000/s burst 100  fallback
//	LastShare  600    1200   10                             500/s burst 50
//	EvenShare  600    1200   10                             100/s burst 10
//	Deny       -      -      -                              deny
//	LastShare  -      -      0                              deny
func FallbackFor(mode StoreLoss, spec Spec, demand, fleetDemand float64, pods int) Fallback {
	if mode == StoreLossDeny || pods == 0 {
		return Fallback{Deny: true}
	}
	f := 1 / float64(pods)
	if mode == StoreLossLastShare {
		f = Share(demand, fleetDemand, pods)
	}
	return Fallback{Rate: spec.RequestsPerSecond * f, Burst: max(int(math.Ceil(float64(spec.Burst)*f)), 1)}
}

// SlotsWant is the number of fleet-wide slots a pod asks for: those in use
// and queued for, plus one so a new attempt need not wait for a lease, at
// most the quota's concurrency.
func SlotsWant(inFlight, queued, concurrency int) int64 {
	return int64(min(inFlight+queued+1, concurrency))
}
