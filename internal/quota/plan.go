package quota

import (
	"math"
	"slices"
	"time"
)

// The pure arithmetic of the quota: the store's division of the rate and
// its schedule of send times (the Model and the Lua script run the same
// steps), how much a pod asks for, and what it admits when the store is
// lost. Kept free of state and clocks so the Client, the Model, the
// rehearsal and the tests share it.

// Interval is the time between two lease operations of a pod under demand:
// at most 10 store operations per second per pod (docs/quota.md).
const Interval = 100 * time.Millisecond

// IdleInterval is the time between two lease operations of a pod without
// demand: it keeps its slots and its place in the fleet alive.
const IdleInterval = time.Second

// LeaseTTL is how long the store keeps a pod's record (its demand and its
// concurrency slots) after its last lease operation: a pod killed holding
// slots gives them back within it (docs/quota.md).
const LeaseTTL = 5 * time.Second

// The store's schedule (docs/quota.md#how-a-pod-draws-on-it).
const (
	// Lead is how far ahead of the store's now a pod's share of the rate is
	// granted: a pod leasing every Interval holds send times until its next
	// lease lands.
	Lead = Interval
	// MaxAhead is the furthest ahead of the store's now that a send time is
	// granted: what a fleet that asks for more than the rate may queue.
	MaxAhead = 3 * Interval
	// CatchUp is the most of its share a pod whose lease came late (a
	// loaded machine) still gets for the time it missed.
	CatchUp = 3 * Interval
	// Drawing is how recently a pod must have leased for its demand to count
	// in the division of the rate: a pod that stopped (descheduled, killed)
	// leaves its share to the others until it leases again.
	Drawing = 3 * Interval
	// PastLife is how long, at least, a send time the store places in the
	// past (for an attempt waiting now, after a quiet spell) stays good
	// after the lease, when the lateness allows it: tolerance = lateness −
	// PastLife.
	PastLife = 2 * Interval
	// MinLateness is the least time after its send time that an attempt may
	// start on it (burst 1 gives none: the pod then only reserves send
	// times ahead and starts on time).
	MinLateness = time.Millisecond
	// MaxDemand bounds the demand a pod reports (per second): a larger,
	// negative or NaN one is taken as that bound or 0. The division is
	// max-min, so no reported demand takes another namespace's share.
	MaxDemand = 1e9
)

// Schedule is the quota's spacing of send times on the store's clock, in
// microseconds: one every Spacing (1/rate) across the fleet; an attempt may
// start on one up to Lateness after it ((burst − 1) × Spacing, at least
// MinLateness); send times for attempts waiting now may be placed up to
// Tolerance in the past (Lateness − PastLife, at least 0), so up to about
// burst of them start at once after a quiet spell.
//
// Send times at least Spacing apart, each used within Lateness of its time,
// start at most rate × t + burst attempts in any window t: those whose time
// is in the window, at most rate × t + 1, and those still good as it opens,
// at most Lateness / Spacing = burst − 1.
//
//	rate    burst  spacing    lateness   tolerance
//	300/s   10     3333.3µs   30ms       0
//	1000/s  500    1ms        499ms      299ms
//	1.5/s   3      666.7ms    1.333s     1.133s
//	100/s   1      10ms       1ms        0
type Schedule struct{ Spacing, Lateness, Tolerance float64 }

// ScheduleOf is the schedule of a quota of rate per second with burst.
func ScheduleOf(rate float64, burst int) Schedule {
	spacing := 1e6 / rate
	late := math.Max(float64(burst-1)*spacing, micros(MinLateness))
	return Schedule{Spacing: spacing, Lateness: late, Tolerance: math.Max(late-micros(PastLife), 0)}
}

func micros(d time.Duration) float64 { return float64(d.Microseconds()) }

// SendTimes turns the store's microseconds into the reply's durations,
// rounded so that a send time is never early and never good for longer.
func SendTimes(first, spacing, late float64) (time.Duration, time.Duration, time.Duration) {
	return time.Duration(math.Ceil(first * 1e3)), time.Duration(math.Ceil(spacing * 1e3)),
		time.Duration(math.Floor(late * 1e3))
}

// divide is max-min fairness: capacity divided among demands so that no
// one gets less than min(its demand, what anyone else gets). Each gets
// min(demand, level) + extra: while the demands exceed the capacity, level
// is the water line and extra 0; when they fit, level is +Inf and extra is
// the rest, split evenly (so a share follows a demand that grows before the
// store hears of it).
//
//	capacity  demands           level  extra   shares
//	300       10, 20, 400       270    0       10, 20, 270
//	300       100, 100          ∞      50      150, 150
//	300       1e12, 1e12, 50    125    0       125, 125, 50
func divide(capacity float64, demands []float64) (level, extra float64) {
	sorted := slices.Clone(demands)
	slices.Sort(sorted)
	left := capacity
	for i, d := range sorted {
		fair := left / float64(len(sorted)-i)
		if d > fair {
			return fair, 0
		}
		left -= d
	}
	return math.Inf(1), left / float64(len(sorted))
}

// claim is one pod's claim in a division: its name, namespace and the
// amount it asks for (a demand per second, or concurrency slots).
type claim struct {
	pod, ns string
	amount  float64
}

// shareOf is what falls to self (a claim in claims, which are ordered by
// pod name) of capacity: max-min across namespaces, each claiming the sum of
// its pods' claims, so that no namespace is held below min(its claim,
// capacity ÷ namespaces claiming) by another's, however large; then the
// namespace's part across its pods, max-min too (maxMin, the concurrency
// slots: a pod with one attempt queued gets its slot) or in proportion to
// their claims (the rate: every attempt of a namespace as likely to be
// served as any other). While the claims fit, each gets its claim and the
// rest evenly.
//
//	capacity  claims (pod/ns: amount)          self  maxMin  share
//	300       a/x 1e9, b/y 100                 b     -       100
//	300       a/x 1e9, b/y 100                 a     -       200
//	300       a1/x 200, a2/x 100, b/y 200      a1    no      100   (x gets 150, split 2:1)
//	300       a1/x 200, a2/x 100, b/y 200      a1    yes     75    (x gets 150, split evenly)
//	300       a1/x 20, a2/x 10                 a1    -       155   (20 + 270 ÷ 2)
func shareOf(capacity float64, claims []claim, self claim, maxMin bool) float64 {
	totals := map[string]float64{}
	var order []string
	for _, c := range claims {
		if _, ok := totals[c.ns]; !ok {
			order = append(order, c.ns)
		}
		totals[c.ns] += c.amount
	}
	nsClaims := make([]float64, 0, len(order))
	for _, ns := range order {
		nsClaims = append(nsClaims, totals[ns])
	}
	level, extra := divide(capacity, nsClaims)
	ours, total := math.Min(totals[self.ns], level)+extra, totals[self.ns]
	var own []float64
	for _, c := range claims {
		if c.ns == self.ns {
			own = append(own, c.amount)
		}
	}
	if maxMin || total <= ours {
		level, extra = divide(ours, own)
		return math.Min(self.amount, level) + extra
	}
	return ours * self.amount / total
}

// Want is the number of send times a pod asks for in one lease operation:
// its demand for the next two intervals less the send times it holds
// unused, at least one when it has demand and holds none, and at least the
// attempts due (waiting for one now). The store grants no more than the
// pod's share of the rate (Model), so a pod of a fleet short of the rate
// may ask for its whole demand.
//
//	demand  on hand  due  want
//	189/s   0        0    38
//	189/s   30       0    8
//	10/s    0        0    2
//	2/s     0        0    1     (0.4, but a pod with demand holds one)
//	0       0        3    3     (a lease kicked by waiting attempts)
//	0       0        0    0
func Want(demand float64, onHand, due int64) int64 {
	w := int64(math.Ceil(demand*(2*Interval).Seconds())) - onHand
	if demand > 0 && onHand == 0 {
		w = max(w, 1)
	}
	return max(w, due, 0)
}

// MaxWant is the most send times one lease operation grants for a quota of
// rate per second, and so the most a pod's want counts for: those that fit
// between now and MaxAhead, ⌊rate × MaxAhead⌋ + 1 (the store bounds want
// by it: Model, and the Lua script of redisstore).
//
//	rate     max want
//	1.5/s    1
//	20/s     7
//	1000/s   301
func MaxWant(rate float64) int64 {
	return int64(math.Floor(micros(MaxAhead)*rate/1e6)) + 1
}

// Fallback is what a pod admits on its own while the store is lost: rate
// attempts per second with burst, or nothing at all (Deny, or a pod that
// never reached the store: it knows neither its share nor the number of
// pods).
type Fallback struct {
	Deny  bool
	Rate  float64
	Burst int
}

// FallbackFor is the fallback of mode for a pod whose last-known share of
// the rate was share (per second) among pods (pods 0: the store was never
// reached). The shares of all pods add up to the rate at most.
//
//	mode       share  pods  quota 1000/s burst 100  fallback
//	LastShare  500/s  10                            500/s burst 50
//	EvenShare  500/s  10                            100/s burst 10
//	Deny       -      -                             deny
//	LastShare  -      0                             deny
func FallbackFor(mode StoreLoss, spec Spec, share float64, pods int) Fallback {
	if mode == StoreLossDeny || pods == 0 {
		return Fallback{Deny: true}
	}
	f := 1 / float64(pods)
	if mode == StoreLossLastShare {
		f = min(share/spec.RequestsPerSecond, 1)
	}
	return Fallback{Rate: spec.RequestsPerSecond * f, Burst: max(int(math.Ceil(float64(spec.Burst)*f)), 1)}
}

// SlotsWant is the number of fleet-wide slots a pod asks for: those in use
// and queued for, plus one so a new attempt need not wait for a lease, at
// most the quota's concurrency; none for a pod without demand (busy false:
// no attempt since its last lease and none in flight or queued), so the
// idle pods' slots go to the pods that have demand.
func SlotsWant(inFlight, queued, concurrency int, busy bool) int64 {
	if !busy && inFlight+queued == 0 {
		return 0
	}
	return int64(min(inFlight+queued+1, concurrency))
}
