package quota

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Model is the store's arithmetic in Go, on an injected clock: the reference
// of the Redis script (package redisstore runs the same steps on Redis's
// clock, and a shared table test holds the two together), used by the
// virtual-clock rehearsal and the unit tests. One Model holds one quota.
// Safe for concurrent use.
//
// The store keeps the fleet's theoretical arrival time (TAT: the next send
// time free) and, per pod, its namespace, demand, slots and virtual time V
// (how far its share of the rate has been granted). A lease operation at
// time now (microseconds on the store's clock), for pod p of namespace n:
//
//  1. the request's numbers are bounded (demand to [0, MaxDemand], NaN 0;
//     want to MaxWant, due to want; slots to the concurrency), and pods
//     not seen for LeaseTTL are forgotten;
//  2. p's share of the rate, r: max-min across the namespaces of the pods
//     that leased within Drawing (each claiming its pods' demand), then in
//     proportion to demand across the pods of n (shareOf);
//  3. p gets k = min(want, ⌊(now + Lead − V) × r⌋, what fits before
//     now + MaxAhead) send times, one every 1/rate (ScheduleOf), the first
//     at max(TAT, now − min(tolerance, (due − 1)/rate)): as many as are
//     due are placed in the past, within the tolerance, the others from
//     now on; TAT moves past the last, and V by k/r, where V is at least
//     now − max(CatchUp, 1/r) (at first, now);
//  4. the concurrency slots divided by what the pods ask for (SlotsWant),
//     max-min across namespaces and across the pods of each: p gets
//     min(its ask, ⌈its share⌉, concurrency − the slots the others hold),
//     and holds at least those it has in use;
//  5. p's record is written with its lease time; a hold later than the
//     fleet's replaces it.
type Model struct {
	Clock clock.Clock

	mu     sync.Mutex
	tat    float64 // µs; none before tatEnd, as the script's key expires
	tatEnd float64
	pods   map[string]member
	hold   time.Time
	down   bool
}

// member is one pod's record in the store.
type member struct {
	ns                  string
	demand              float64
	slotWant, slotsHeld int64
	seen                float64 // µs
	v                   float64 // µs
}

// NewModel returns an empty store on clk.
func NewModel(clk clock.Clock) *Model { return &Model{Clock: clk, pods: map[string]member{}} }

// SetDown makes the store unreachable (true) or reachable again.
func (m *Model) SetDown(down bool) { m.mu.Lock(); m.down = down; m.mu.Unlock() }

// ErrModelDown is the error of a Model that is down.
var ErrModelDown = storeError("quota model store is down")

type storeError string

func (e storeError) Error() string { return string(e) }

// Forget drops the record of every pod of namespace (its namespace was
// revoked): its share of the rate and its slots go to the others with
// their next lease. Send times already granted stay granted.
func (m *Model) Forget(_ context.Context, _ Spec, namespace string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return ErrModelDown
	}
	for name, p := range m.pods {
		if p.ns == namespace {
			delete(m.pods, name)
		}
	}
	return nil
}

// Lease implements Store.
func (m *Model) Lease(_ context.Context, spec Spec, r LeaseRequest) (LeaseReply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return LeaseReply{}, ErrModelDown
	}
	nowT := m.Clock.Now()
	now := float64(nowT.UnixMicro())
	r = bounded(spec, r)
	self, known := m.pods[r.Pod]
	known = known && now-self.seen < micros(LeaseTTL)
	drawing, live, othersHeld := m.claims(r, now)
	reply := LeaseReply{Pods: len(live)}
	for _, c := range drawing {
		reply.FleetDemand += c.amount
	}
	reply.Rate = shareOf(spec.RequestsPerSecond, drawing, claim{r.Pod, r.Namespace, r.Demand}, false)
	v := now
	if known {
		v = math.Max(self.v, now-catchUp(reply.Rate))
	}
	sch := ScheduleOf(spec.RequestsPerSecond, spec.Burst)
	var first float64
	reply.Granted, first, v = m.grant(sch, now, r, reply.Rate, v)
	if reply.Granted > 0 {
		reply.First, reply.Spacing, reply.Lateness = SendTimes(first-now, sch.Spacing, sch.Lateness)
	}
	if spec.Concurrency > 0 {
		fair := shareOf(float64(spec.Concurrency), live, claim{r.Pod, r.Namespace, float64(r.Slots)}, true)
		// Rounded up, less a hair: a part of 2 summed as 2.0000000001 is 2.
		reply.Slots = max(min(r.Slots, int64(math.Ceil(fair-1e-9)), int64(spec.Concurrency)-othersHeld), 0)
	}
	m.pods[r.Pod] = member{ns: r.Namespace, demand: r.Demand, slotWant: r.Slots,
		slotsHeld: max(reply.Slots, r.InUse), seen: now, v: v}
	if r.Hold.After(m.hold) && r.Hold.After(nowT) {
		m.hold = r.Hold
	}
	if m.hold.After(nowT) {
		reply.Hold = m.hold
	}
	return reply, nil
}

// catchUp is how much of the time it missed a pod whose share is rate
// still gets: CatchUp, or one send time of its share if that is longer (a
// share below one send time per CatchUp would never earn one).
func catchUp(rate float64) float64 {
	if rate <= 0 {
		return micros(CatchUp)
	}
	return math.Max(micros(CatchUp), 1e6/rate)
}

// bounded is r with every number the pod chose within the quota's bounds.
func bounded(spec Spec, r LeaseRequest) LeaseRequest {
	if !(r.Demand >= 0) { // negative or NaN
		r.Demand = 0
	}
	r.Demand = math.Min(r.Demand, MaxDemand)
	r.Want = max(min(r.Want, MaxWant(spec.RequestsPerSecond)), 0)
	r.Due = max(min(r.Due, r.Want), 0)
	c := int64(spec.Concurrency)
	r.Slots, r.InUse = max(min(r.Slots, c), 0), max(min(r.InUse, c), 0)
	return r
}

// claims forgets the pods not seen for LeaseTTL and returns, ordered by pod
// name and with r's own: the demands of the pods drawing (leased within
// Drawing), the slot asks of the live ones, and the slots the others hold.
func (m *Model) claims(r LeaseRequest, now float64) (drawing, live []claim, othersHeld int64) {
	self := claim{r.Pod, r.Namespace, r.Demand}
	drawing, live = []claim{self}, []claim{{r.Pod, r.Namespace, float64(r.Slots)}}
	for name, p := range m.pods {
		switch {
		case now-p.seen >= micros(LeaseTTL):
			delete(m.pods, name)
		case name != r.Pod:
			live = append(live, claim{name, p.ns, float64(p.slotWant)})
			othersHeld += p.slotsHeld
			if now-p.seen < micros(Drawing) {
				drawing = append(drawing, claim{name, p.ns, p.demand})
			}
		}
	}
	byPod := func(a, b claim) int { return strings.Compare(a.pod, b.pod) }
	slices.SortFunc(drawing, byPod)
	slices.SortFunc(live, byPod)
	return drawing, live, othersHeld
}

// grant is step 3: k send times for a pod whose share is rate and whose
// virtual time is v, the first of them, and its virtual time after.
func (m *Model) grant(sch Schedule, now float64, r LeaseRequest, rate, v float64) (int64, float64, float64) {
	credit := 0.0
	if rate > 0 {
		credit = math.Floor((now + micros(Lead) - v) * rate / 1e6)
	}
	first := now - math.Min(sch.Tolerance, float64(max(r.Due-1, 0))*sch.Spacing)
	if now < m.tatEnd && m.tat > first {
		first = m.tat
	}
	room := 0.0
	if first <= now+micros(MaxAhead) {
		room = math.Floor((now+micros(MaxAhead)-first)/sch.Spacing) + 1
	}
	k := max(min(float64(r.Want), credit, room), 0)
	if k > 0 {
		m.tat = first + k*sch.Spacing
		m.tatEnd = now + math.Ceil((micros(MaxAhead)+sch.Lateness+sch.Tolerance+micros(LeaseTTL))/1000)*1000
		v += k * 1e6 / rate
	}
	return int64(k), first, v
}
