package quota

import (
	"context"
	"errors"
	"github.com/retrydev/retry-operator/internal/admission"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// StoreTimeout bounds one lease operation. Requests never wait for the store
// (they spend tokens on hand); a slower store only makes a lease late.
const StoreTimeout = 250 * time.Millisecond

// overdueWait is the least an attempt without a token waits while the step
// that should bring the next tokens is overdue (TakeAt).
const overdueWait = Interval / 4

// ErrRefused marks a store error that retrying will not mend by itself: a
// wrong password, or an ACL user not allowed the keys or commands of the
// quota. A Store wraps it (errors.Is).
var ErrRefused = errors.New("store refused the quota's client")

// State is the client's view of its store; its String is the label of the
// retry_sidecar_quota_store_state metric.
type State uint8

// The states of the store as a client sees it.
const (
	StateConnecting  State = iota // no lease operation has ended yet
	StateReachable                // the last lease operation succeeded
	StateUnreachable              // it failed: onStoreLoss is in force
	StateRefused                  // it was refused (ErrRefused): onStoreLoss is in force
)

// States lists every State, in order.
func States() []State {
	return []State{StateConnecting, StateReachable, StateUnreachable, StateRefused}
}

func (s State) String() string {
	switch s {
	case StateReachable:
		return "reachable"
	case StateUnreachable:
		return "unreachable"
	case StateRefused:
		return "refused"
	}
	return "connecting"
}

// Observer is told of every lease operation (latency, tokens granted, error)
// and of every change of state. It is called on the client's own goroutine,
// never on the request path; nil fields are skipped.
type Observer struct {
	Lease func(quota string, took time.Duration, granted int64, err error)
	State func(quota string, s State)
}

// Client is one pod's share of a SharedQuota: it implements
// admission.Quota. Attempts spend the tokens it holds (one atomic
// operation, no allocation); a background step every Interval (every
// IdleInterval without demand) reports this pod's demand to the store and
// leases the next batch, sized by Want. While the store is lost it admits
// what onStoreLoss says (FallbackFor). Create it with New, call Start, and
// Close it when no configuration names the quota any more.
type Client struct {
	store Store
	clk   clock.Clock
	pod   string
	log   *slog.Logger
	obs   Observer
	spec  atomic.Pointer[Spec]
	slots *admission.Gate // nil without concurrency

	tokens    atomic.Int64
	arrivals  atomic.Int64 // attempts that asked since the last step
	admitted  atomic.Uint64
	waited    atomic.Uint64                       // attempts that found no token on hand
	denied    atomic.Uint64                       // attempts refused outright (Deny)
	leased    atomic.Uint64                       // tokens granted by the store, all time
	ops       atomic.Uint64                       // lease operations, all time
	waits     [len(WaitBuckets) + 1]atomic.Uint64 // admissions by wait (WaitBuckets, then longer)
	waitSum   atomic.Int64                        // ns
	fallback  atomic.Pointer[fallbackLimiter]
	hold      atomic.Int64 // fleet hold end, Unix ns; 0 = none
	wantHold  atomic.Int64 // a hold seen here, not yet told to the store
	nextStep  atomic.Int64 // Unix ns of the next step
	leaseRTT  atomic.Int64 // ns the last lease operation took
	lastOp    atomic.Int64 // Unix ns of the last lease operation
	kicked    atomic.Bool
	stateNow  atomic.Uint32
	closed    atomic.Bool
	stepMu    sync.Mutex // one step at a time
	timerMu   sync.Mutex
	timer     clock.Timer
	gen       uint64 // of timer; under timerMu
	loopState        // touched only by step, under stepMu
}

type loopState struct {
	demand      float64 // attempts per second here, smoothed
	fleetDemand float64
	leasedAt    float64 // the demand reported with the last lease that succeeded: part of fleetDemand
	pods        int     // live pods at the last lease; 0 = never reached
	lastStep    time.Time
	gap, dev    time.Duration // between steps, smoothed, and its mean deviation: Horizon
	lastOK      time.Time
	state       State
	carry       float64 // of Want
}

type fallbackLimiter struct {
	deny bool
	lim  *rate.Limiter
}

var _ admission.Quota = (*Client)(nil)

// New returns a client of spec for pod (unique in the fleet) over store, on
// clk. log gets one line per change of the store's state; obs may be zero.
func New(spec Spec, store Store, clk clock.Clock, pod string, log *slog.Logger, obs Observer) *Client {
	if log == nil {
		log = slog.Default()
	}
	c := &Client{store: store, clk: clk, pod: pod, log: log, obs: obs}
	c.spec.Store(&spec)
	if spec.Concurrency > 0 {
		c.slots = admission.NewGate(slotGate(0))
	}
	return c
}

// slotGate is the local gate of n leased slots. Waiters queue up to the
// caller's own deadline (the quota has no queue settings of its own).
func slotGate(n int64) admission.ConcurrencyConfig {
	return admission.ConcurrencyConfig{MaxInFlight: int(n), MaxQueued: 1 << 12, QueueTimeout: 30 * time.Second}
}

// Spec is the quota in force.
func (c *Client) Spec() Spec { return *c.spec.Load() }

// SetSpec changes the rate, burst and onStoreLoss in place (a reload): the
// tokens and slots held are kept. A change of concurrency from or to none
// needs a new Client.
func (c *Client) SetSpec(s Spec) { c.spec.Store(&s) }

// Start makes the first lease operation (so the first attempts find tokens
// and slots) and schedules the next ones. It returns the store's error, if
// any; the client runs on (in onStoreLoss) either way.
func (c *Client) Start() error {
	return c.step(true)
}

// Close stops the lease operations. Tokens held are dropped with the client;
// the store forgets them after LeaseTTL.
func (c *Client) Close() {
	c.closed.Store(true)
	c.timerMu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timerMu.Unlock()
}

// TakeAt implements admission.Quota: a token on hand, else the fallback of
// a lost store, else a wait until the next lease.
func (c *Client) TakeAt(now time.Time, waited time.Duration) (time.Duration, admission.QuotaVerdict) {
	// Demand counts every ask: an attempt that waits asks again after each
	// lease and weighs 1 + (intervals waited)², so a pod's share follows its
	// backlog and above all its oldest waiters, and the fleet serves long
	// waiters first (about in order, as one pod's rate limiter would;
	// linear weights still left one in 600 shed in the seed rehearsal).
	w := int64(waited / Interval)
	c.arrivals.Add(1 + min(w*w, 1<<20))
	again := waited > 0
	for n := c.tokens.Load(); n > 0; n = c.tokens.Load() {
		if c.tokens.CompareAndSwap(n, n-1) {
			c.admitted.Add(1)
			c.observeWait(waited)
			return 0, admission.QuotaGranted
		}
	}
	if fb := c.fallback.Load(); fb != nil {
		if fb.deny {
			c.denied.Add(1)
			return Interval, admission.QuotaDenied
		}
		if fb.lim.AllowN(now, 1) {
			c.admitted.Add(1)
			c.observeWait(waited)
			return 0, admission.QuotaGranted
		}
	}
	if !again {
		c.waited.Add(1)
	}
	c.kick(now)
	// The next tokens land when the next lease operation has come back: its
	// time plus the store's round trip (a waiter that woke at the step
	// itself would find nothing yet and sleep a whole interval while its
	// tokens sat unspent), and a millisecond for the step to apply them (none
	// on a virtual clock, where the store takes no time and the step's timer
	// fires before the waiters').
	//
	// A step already overdue (a loaded machine runs timers late) has no
	// known landing time: the waiters ask again after as long as it is
	// already late, a quarter interval at least and an interval at most.
	// Polling every round trip, hundreds of them took the CPU the late step
	// needed; every quarter interval, 50 sidecars on 2 CPUs, once a stall
	// made their steps late, spent their CPU on waking waiters and did not
	// recover (docs/performance.md#shared-quota): the later the steps, the
	// less the waiters may poll.
	wait := time.Duration(c.nextStep.Load() - now.UnixNano())
	if wait < 0 {
		return min(max(-wait, overdueWait), Interval), admission.QuotaWait
	}
	if rtt := time.Duration(c.leaseRTT.Load()); rtt > 0 {
		wait += rtt + time.Millisecond
	}
	return max(wait, time.Millisecond), admission.QuotaWait
}

// WaitBuckets are the upper bounds of the admission-wait histogram
// (retry_sidecar_quota_admission_wait_seconds, docs/quota.md#metrics): from
// a token on hand (0) through a wait for the next lease (about Interval) to
// a deadline's worth.
var WaitBuckets = [...]time.Duration{0, time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second}

// observeWait counts an admission after waited in its bucket: a few
// comparisons and two atomic adds, no allocation.
func (c *Client) observeWait(waited time.Duration) {
	i := 0
	for i < len(WaitBuckets) && waited > WaitBuckets[i] {
		i++
	}
	c.waits[i].Add(1)
	c.waitSum.Add(int64(waited))
}

// AdmissionWaits are the attempts admitted since New by the time they waited
// for a token: counts[i] waited at most WaitBuckets[i] and more than the
// bucket before, the last those that waited longer than every bound; sum is
// the time waited in all.
func (c *Client) AdmissionWaits() (counts [len(WaitBuckets) + 1]uint64, sum time.Duration) {
	for i := range c.waits {
		counts[i] = c.waits[i].Load()
	}
	return counts, time.Duration(c.waitSum.Load())
}

// kick leases at once when the tokens ran out and the last lease operation
// is at least Interval old (after an idle spell): never more than one lease
// operation per Interval.
func (c *Client) kick(now time.Time) {
	if now.UnixNano()-c.lastOp.Load() < int64(Interval) || !c.kicked.CompareAndSwap(false, true) {
		return
	}
	c.clk.AfterFunc(0, c.kickedStep)
}

// kickedStep is a step asked for by kick, unless a step ran meanwhile.
func (c *Client) kickedStep() {
	_ = c.step(false)
}

// Untake implements admission.Quota.
func (c *Client) Untake() { c.tokens.Add(1); c.admitted.Add(^uint64(0)) }

// Slots implements admission.Quota.
func (c *Client) Slots() *admission.Gate { return c.slots }

// HoldUntil implements admission.Quota.
func (c *Client) HoldUntil(now time.Time) time.Time {
	if u := c.hold.Load(); u > now.UnixNano() {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// Hold implements admission.Quota: the hold goes to the store with the next
// lease operation, which is made at once if the last is Interval old.
func (c *Client) Hold(until time.Time) {
	u := until.UnixNano()
	for cur := c.wantHold.Load(); u > cur; cur = c.wantHold.Load() {
		if c.wantHold.CompareAndSwap(cur, u) {
			break
		}
	}
	for cur := c.hold.Load(); u > cur; cur = c.hold.Load() {
		if c.hold.CompareAndSwap(cur, u) {
			break
		}
	}
	c.kick(c.clk.Now())
}

// Stats are the client's counters since New.
type Stats struct {
	Admitted, Waited, Denied uint64 // attempts: took a token; found none on hand; refused (Deny)
	Leased, Operations       uint64 // tokens granted by the store; lease operations
	Tokens                   int64  // on hand now
	State                    State
}

// Stats returns the counters (read at scrape time by the sidecar's metrics).
func (c *Client) Stats() Stats {
	return Stats{Admitted: c.admitted.Load(), Waited: c.waited.Load(), Denied: c.denied.Load(),
		Leased: c.leased.Load(), Operations: c.ops.Load(), Tokens: c.tokens.Load(), State: State(c.stateNow.Load())}
}

// step is one lease operation: it measures the demand since the last step,
// reports it with the tokens and slots held, adds what the store granted,
// and schedules the next step. An idle pod whose last operation is recent
// skips the store. Unless first, a step less than Interval after the last
// operation is dropped: a kicked step and a timer's that both waited for the
// one before would otherwise run back to back (that one scheduled the next).
func (c *Client) step(first bool) error {
	c.stepMu.Lock()
	defer c.stepMu.Unlock()
	defer c.kicked.Store(false) // after lastOp moved: one kick per interval
	if c.closed.Load() {
		return nil
	}
	now := c.clk.Now()
	if !first && now.UnixNano()-c.lastOp.Load() < int64(Interval) {
		return nil
	}
	spec := c.Spec()
	arrivals := c.arrivals.Swap(0)
	horizon := Interval
	if dt := now.Sub(c.lastStep); !c.lastStep.IsZero() {
		// Arrivals count over at least an interval: a step kicked just
		// after an idle one (at the same instant on a virtual clock) would
		// read one arrival 50 µs later as 20,000/s, or drop it at dt 0.
		inst := float64(arrivals) / max(dt, Interval).Seconds()
		if c.demand == 0 {
			c.demand = inst // the first demand seen is not halved
		} else {
			c.demand = (c.demand + inst) / 2
		}
		if dt > 0 {
			c.gap, c.dev = Lateness(c.gap, c.dev, dt)
			horizon = Horizon(c.gap, c.dev, c.fleetDemand > spec.RequestsPerSecond)
		}
	}
	c.lastStep = now
	inUse, queued := 0, 0
	if c.slots != nil {
		inUse, queued = c.slots.InFlight(), c.slots.Queued()
	}
	idle := arrivals == 0 && inUse == 0 && c.wantHold.Load() == 0
	if idle && c.state == StateReachable && now.Sub(time.Unix(0, c.lastOp.Load())) < IdleInterval-Interval/2 {
		c.schedule(now, Interval)
		return nil
	}
	var returned int64
	if arrivals == 0 && c.state == StateReachable {
		returned = c.tokens.Swap(0) // unspent for an interval: others may need them
	}
	held := c.tokens.Load()
	req := LeaseRequest{Pod: c.pod, Held: held, Returned: returned, Demand: c.demand, InUse: int64(inUse)}
	req.Want, c.carry = Want(c.demand, c.fleetDemand, spec.RequestsPerSecond, horizon, held, c.carry)
	if spec.Concurrency > 0 {
		req.Slots = SlotsWant(inUse, queued, spec.Concurrency)
	}
	if h := c.wantHold.Load(); h > 0 {
		req.Hold = time.Unix(0, h)
	}
	c.lastOp.Store(now.UnixNano())
	c.ops.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), StoreTimeout)
	reply, err := c.store.Lease(ctx, spec, req)
	cancel()
	c.leaseRTT.Store(int64(c.clk.Now().Sub(now)))
	if c.obs.Lease != nil {
		c.obs.Lease(spec.Name, c.clk.Now().Sub(now), reply.Granted, err)
	}
	if err != nil {
		c.lost(now, spec, err)
	} else {
		c.apply(now, spec, req, reply)
	}
	c.schedule(now, Interval)
	return err
}

func (c *Client) schedule(now time.Time, d time.Duration) {
	c.nextStep.Store(now.Add(d).UnixNano())
	c.timerMu.Lock()
	defer c.timerMu.Unlock()
	if c.closed.Load() {
		return
	}
	if c.timer != nil {
		c.timer.Stop() // a kick ran the step early: one chain of steps only
	}
	c.gen++
	gen := c.gen
	c.timer = c.clk.AfterFunc(d, func() {
		c.timerMu.Lock()
		stale := gen != c.gen // fired as a kicked step rescheduled
		c.timerMu.Unlock()
		if !stale {
			_ = c.step(false)
		}
	})
}

// apply takes in a successful lease operation.
func (c *Client) apply(now time.Time, spec Spec, req LeaseRequest, r LeaseReply) {
	c.tokens.Add(r.Granted)
	c.leased.Add(uint64(r.Granted))
	c.fleetDemand, c.leasedAt, c.pods, c.lastOK = r.FleetDemand, req.Demand, r.Pods, now
	if !req.Hold.IsZero() {
		c.wantHold.CompareAndSwap(req.Hold.UnixNano(), 0)
	}
	if !r.Hold.IsZero() {
		u := r.Hold.UnixNano()
		for cur := c.hold.Load(); u > cur; cur = c.hold.Load() {
			if c.hold.CompareAndSwap(cur, u) {
				break
			}
		}
	}
	if c.slots != nil {
		c.slots.SetConfig(slotGate(r.Slots))
	}
	c.fallback.Store(nil)
	c.setState(StateReachable, spec, nil)
}

// lost takes in a failed lease operation: the fallback of onStoreLoss, set
// once per loss, and the tokens on hand dropped once the store has forgotten
// them (LeaseTTL after the last success).
func (c *Client) lost(now time.Time, spec Spec, err error) {
	if now.Sub(c.lastOK) >= LeaseTTL {
		c.tokens.Store(0)
	}
	s := StateUnreachable
	if errors.Is(err, ErrRefused) {
		s = StateRefused
	}
	if c.state == StateReachable || c.state == StateConnecting {
		// The share is of the demand the store summed into fleetDemand, not
		// of the demand now, which counts again the attempts waiting since
		// (each weighs more the longer it waits): the shares of a lost store
		// would add up to more than the rate (a benchmark run admitted
		// 114.6 % of it, docs/performance.md#shared-quota).
		fb := FallbackFor(spec.OnStoreLoss, spec, c.leasedAt, c.fleetDemand, c.pods)
		l := &fallbackLimiter{deny: fb.Deny}
		if !fb.Deny {
			l.lim = rate.NewLimiter(rate.Limit(fb.Rate), fb.Burst)
			l.lim.AllowN(now, fb.Burst) // no burst on top of the tokens on hand
		}
		c.fallback.Store(l)
		if c.slots != nil {
			c.slots.SetConfig(slotGate(fallbackSlots(spec, fb, c.pods, c.slots.InFlight())))
		}
	}
	c.setState(s, spec, err)
}

// fallbackSlots is the concurrency a pod keeps while the store is lost:
// none under Deny, its even share under EvenShare, what it holds under
// LastShare.
func fallbackSlots(spec Spec, fb Fallback, pods, inUse int) int64 {
	switch {
	case fb.Deny:
		return 0
	case spec.OnStoreLoss == StoreLossEvenShare:
		return int64(spec.Concurrency / max(pods, 1))
	}
	return int64(inUse)
}

// setState records s and logs and reports a change, once.
func (c *Client) setState(s State, spec Spec, err error) {
	if s == c.state {
		return
	}
	c.state = s
	c.stateNow.Store(uint32(s))
	if c.obs.State != nil {
		c.obs.State(spec.Name, s)
	}
	if s == StateReachable {
		c.log.Info("quota store reachable", "quota", spec.Name)
		return
	}
	c.log.Warn("quota store lost", "quota", spec.Name, "state", s.String(),
		"on_store_loss", string(spec.OnStoreLoss), "error", err.Error())
}
