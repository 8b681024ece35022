package quota

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Model is the store's arithmetic in Go, on an injected clock: the reference
// of the Redis script (package redisstore runs the same steps on Redis's
// clock), used by the virtual-clock rehearsal and the unit tests. One Model
// holds one quota. Safe for concurrent use.
//
// A lease operation at time now, for pod p asking for want tokens:
//
//  1. pods whose last lease is older than LeaseTTL are forgotten (their
//     tokens, slots and demand with them);
//  2. the bucket fills at the rate for the time since the last operation,
//     and takes back the tokens p returns, up to burst − the tokens every pod holds (so bucket + tokens on hand ≤
//     burst, and the fleet starts at most rate × t + burst in any window t);
//  3. p gets min(want, whole tokens in the bucket) but, while the fleet is
//     short, no more than its whole credit (Entitlement) plus one token it
//     may owe (a share of less than a token per lease is not starved), or
//     the tokens the other pods' credits leave, whichever is more; and as
//     much again from
//     what is left above half the burst (tokens the other pods did not ask
//     for, which would overflow), and min(slots asked, concurrency − slots
//     of the other pods) slots;
//  4. p's held tokens, demand and slots are recorded with its lease time;
//  5. a hold later than the fleet's replaces it.
type Model struct {
	Clock clock.Clock

	mu     sync.Mutex
	tokens float64
	last   time.Time
	pods   map[string]modelPod
	hold   time.Time
	// Down makes Lease fail, as an unreachable store does.
	down bool
}

type modelPod struct {
	held   int64
	demand float64
	slots  int64
	seen   time.Time
	credit float64 // Entitlement's
}

// NewModel returns an empty store on clk.
func NewModel(clk clock.Clock) *Model { return &Model{Clock: clk, pods: map[string]modelPod{}} }

// SetDown makes the store unreachable (true) or reachable again.
func (m *Model) SetDown(down bool) { m.mu.Lock(); m.down = down; m.mu.Unlock() }

// ErrModelDown is the error of a Model that is down.
var ErrModelDown = storeError("quota model store is down")

type storeError string

func (e storeError) Error() string { return string(e) }

// Lease implements Store.
func (m *Model) Lease(_ context.Context, spec Spec, r LeaseRequest) (LeaseReply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return LeaseReply{}, ErrModelDown
	}
	now := m.Clock.Now()
	var othersHeld, othersSlots int64
	reply := LeaseReply{FleetDemand: r.Demand, Pods: 1}
	elapsed, credit := time.Duration(-1), 0.0 // a new pod
	for name, p := range m.pods {
		if name == r.Pod {
			if now.Sub(p.seen) < LeaseTTL {
				elapsed, credit = now.Sub(p.seen), p.credit
			}
			continue
		}
		if now.Sub(p.seen) >= LeaseTTL {
			delete(m.pods, name)
			continue
		}
		othersHeld += p.held
		othersSlots += p.slots
		reply.FleetDemand += p.demand
		reply.Pods++
	}
	if m.last.IsZero() {
		m.tokens, m.last = float64(spec.Burst), now
	}
	if now.After(m.last) {
		m.tokens += spec.RequestsPerSecond * now.Sub(m.last).Seconds()
		m.last = now
	}
	m.tokens += float64(r.Returned)
	m.tokens = math.Min(m.tokens, math.Max(float64(int64(spec.Burst)-othersHeld-r.Held), 0))
	credit, capped := Entitlement(credit, r.Demand, reply.FleetDemand, spec.RequestsPerSecond, elapsed)
	reply.Granted = max(min(r.Want, int64(m.tokens)), 0)
	if capped {
		free := int64(m.tokens - m.owed(r.Pod, reply.FleetDemand, spec.RequestsPerSecond, now))
		reply.Granted = min(reply.Granted, max(int64(math.Floor(credit))+1, free))
		credit = max(credit-float64(reply.Granted), -1)
	}
	m.tokens -= float64(reply.Granted)
	if over := int64(m.tokens - float64(spec.Burst)/2); over > 0 && r.Want > 0 {
		// More than half the burst is left: other pods did not ask for it
		// (late, or idle), and it would overflow. p may take as much again.
		extra := min(over, r.Want)
		reply.Granted += extra
		m.tokens -= float64(extra)
	}
	if spec.Concurrency > 0 {
		reply.Slots = max(min(r.Slots, int64(spec.Concurrency)-othersSlots), 0)
	}
	m.pods[r.Pod] = modelPod{held: r.Held + reply.Granted, demand: r.Demand,
		slots: max(reply.Slots, r.InUse), seen: now, credit: credit}
	if r.Hold.After(m.hold) && r.Hold.After(now) {
		m.hold = r.Hold
	}
	if m.hold.After(now) {
		reply.Hold = m.hold
	}
	return reply, nil
}

// owed is the credit of every live pod but pod, as of now: the tokens of the
// bucket they are owed, which pod may not take beyond its own credit.
func (m *Model) owed(pod string, fleetDemand, rate float64, now time.Time) float64 {
	owed := 0.0
	for name, p := range m.pods {
		if name != pod {
			c, _ := Entitlement(p.credit, p.demand, fleetDemand, rate, now.Sub(p.seen))
			owed += c
		}
	}
	return owed
}
