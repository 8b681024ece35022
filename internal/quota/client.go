package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// StoreTimeout bounds one lease operation. Requests never wait for the store
// (they take send times on hand); a slower store only makes a lease late.
const StoreTimeout = 250 * time.Millisecond

// overdueWait is the least an attempt without a send time waits while the step
// that should bring the next send times is overdue (TakeAt).
const overdueWait = Interval / 4

// ErrRefused marks a store error that retrying will not mend by itself: a
// wrong password, or an ACL user not allowed the keys or commands of the
// quota. A Store wraps it (errors.Is).
var ErrRefused = errors.New("store refused the quota's client")

// ErrRevoked marks a store's answer that this pod may not draw on the quota
// at all any more: its namespace left the quota's consumers, its identity was
// rejected, its namespace is gone. A Store wraps it (errors.Is). Unlike a lost
// store it is not a reason to keep sending at a last share: the client admits
// nothing from the first such answer on, whatever onStoreLoss says, until a
// lease succeeds again (docs/quota.md#trust).
var ErrRevoked = errors.New("the quota's store revoked this pod's right to draw on it")

// ErrLate marks a lease operation the store put off (the lease endpoint's
// 429: this pod asked too often): not a loss. The client keeps its state and
// what it holds, and leases again at the next step.
var ErrLate = errors.New("the quota's store put this lease operation off")

// State is the client's view of its store; its String is the label of the
// retry_sidecar_quota_store_state metric.
type State uint8

// The states of the store as a client sees it.
const (
	StateConnecting  State = iota // no lease operation has ended yet
	StateReachable                // the last lease operation succeeded
	StateUnreachable              // it failed: onStoreLoss is in force
	StateRefused                  // it was refused (ErrRefused): onStoreLoss is in force
	StateRevoked                  // the right to draw was revoked (ErrRevoked): nothing is admitted
)

// States lists every State, in order.
func States() []State {
	return []State{StateConnecting, StateReachable, StateUnreachable, StateRefused, StateRevoked}
}

func (s State) String() string {
	switch s {
	case StateReachable:
		return "reachable"
	case StateUnreachable:
		return "unreachable"
	case StateRefused:
		return "refused"
	case StateRevoked:
		return "revoked"
	}
	return "connecting"
}

// Observer is told of every lease operation (latency, send times granted,
// error) and of every change of state. It is called on the client's own
// goroutine, never on the request path; nil fields are skipped.
type Observer struct {
	Lease func(quota string, took time.Duration, granted int64, err error)
	State func(quota string, s State)
}

// Pod is who leases: the pod's name (unique in the fleet) and its
// namespace, the unit of fairness between a quota's consumers. Behind the
// manager's lease endpoint the endpoint sets both from the pod's verified
// identity; a sidecar that reaches the store itself (--policy-file) gives
// the namespace of the policies that name the quota (docs/quota.md).
type Pod struct {
	Namespace, Name string
}

// Client is one pod's share of a SharedQuota: it implements
// limits.Quota. Attempts take the send times it holds (a short critical
// section, no allocation): one whose time has come starts at once, a later
// one is reserved and the attempt waits for it. A background step every
// Interval (every IdleInterval without demand) reports this pod's demand to
// the store and leases the next send times, as many as Want. While the
// store is lost it admits what onStoreLoss says (FallbackFor). Create it
// with New, call Start, and Close it when no configuration names the quota
// any more.
type Client struct {
	store Store
	clk   clock.Clock
	pod   Pod
	log   *slog.Logger
	obs   Observer
	spec  atomic.Pointer[Spec]
	slots *limits.Gate // nil without concurrency

	mu   sync.Mutex // guards hand
	hand onHand

	arrivals  atomic.Int64 // attempts that asked since the last step
	due       atomic.Int64 // asks that found no send time since the last step
	admitted  atomic.Uint64
	waited    atomic.Uint64                       // attempts that found no send time on hand
	denied    atomic.Uint64                       // attempts refused outright (Deny)
	leased    atomic.Uint64                       // send times granted by the store, all time
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
	share       float64 // this pod's share of the rate at the last lease (LastShare)
	pods        int     // live pods at the last lease; 0 = never reached
	leasedSlots int64   // fleet slots granted by the last lease
	lastStep    time.Time
	state       State
}

type fallbackLimiter struct {
	deny bool
	lim  *rate.Limiter
}

var _ limits.Quota = (*Client)(nil)

// New returns a client of spec for pod over store, on clk. log gets one
// line per change of the store's state; obs may be zero.
func New(spec Spec, store Store, clk clock.Clock, pod Pod, log *slog.Logger, obs Observer) *Client {
	if log == nil {
		log = slog.Default()
	}
	c := &Client{store: store, clk: clk, pod: pod, log: log, obs: obs}
	c.spec.Store(&spec)
	if spec.Concurrency > 0 {
		c.slots = limits.NewGate(slotGate(0))
	}
	return c
}

// slotGate is the local gate of n leased slots. Waiters queue up to the
// caller's own deadline (the quota has no queue settings of its own).
func slotGate(n int64) limits.ConcurrencyConfig {
	return limits.ConcurrencyConfig{MaxInFlight: int(n), MaxQueued: 1 << 12, QueueTimeout: 30 * time.Second}
}

// Spec is the quota in force.
func (c *Client) Spec() Spec { return *c.spec.Load() }

// SetSpec changes the rate, burst and onStoreLoss in place (a reload): the
// send times and slots held are kept. A change of concurrency from or to
// none needs a new Client.
func (c *Client) SetSpec(s Spec) { c.spec.Store(&s) }

// Start makes the first lease operation (so the store knows the pod) and
// schedules the next ones. It returns the store's error, if any; the client
// runs on (in onStoreLoss) either way.
func (c *Client) Start() error {
	return c.step(true)
}

// Close stops the lease operations. Send times held are dropped with the
// client.
func (c *Client) Close() {
	c.closed.Store(true)
	c.timerMu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timerMu.Unlock()
}

// TakeAt implements limits.Quota: the earliest send time on hand that is
// still good (at once if its time has come, reserved if it comes within
// maxWait), else the fallback of a lost store, else a wait until the next
// lease. An attempt counts in the pod's arrivals on its first ask, and as
// due (measure) once per lease while it waits for one.
func (c *Client) TakeAt(now time.Time, waited, maxWait time.Duration) (limits.SendTime, limits.QuotaVerdict) {
	if waited == 0 {
		c.arrivals.Add(1)
	}
	c.mu.Lock()
	t, found, ok := c.hand.take(now, maxWait)
	c.mu.Unlock()
	if ok {
		c.admitted.Add(1)
		c.observeWait(waited + t.At.Sub(now))
		return t, limits.QuotaGranted
	}
	if fb := c.fallback.Load(); fb != nil {
		if fb.deny {
			c.denied.Add(1)
			return limits.SendTime{At: now.Add(Interval)}, limits.QuotaDenied
		}
		if fb.lim.AllowN(now, 1) {
			c.admitted.Add(1)
			c.observeWait(waited)
			return limits.SendTime{At: now}, limits.QuotaGranted
		}
	}
	if waited == 0 {
		c.waited.Add(1)
	}
	if found {
		// The earliest send time on hand is beyond maxWait, and the next
		// lease brings only later ones: ask again (or be shed) for it.
		return limits.SendTime{At: t.At}, limits.QuotaWait
	}
	wait, overdue := c.nextLease(now)
	if waited == 0 || !overdue {
		// Due once per lease: an attempt asks again after each lease lands,
		// and while one is overdue it polls, which must not count again.
		c.due.Add(1)
	}
	if c.kick(now) {
		// The lease this ask kicked lands a round trip from now, not at the
		// next step (an attempt after an idle spell waited up to an interval
		// for the step while its lease had landed).
		wait = time.Duration(c.leaseRTT.Load()) + time.Millisecond
	}
	return limits.SendTime{At: now.Add(wait)}, limits.QuotaWait
}

// nextLease is how long until the next lease has landed, as a waiter should
// sleep, and whether that lease is overdue: the step's time plus the
// store's round trip (a waiter that woke at the step itself would find
// nothing yet and sleep a whole interval), and a millisecond for the step to
// apply it (none on a virtual clock, where the store takes no time and the
// step's timer fires before the waiters').
//
// A step already overdue (a loaded machine runs timers late) has no known
// landing time: the waiters ask again after as long as it is already late,
// a quarter interval at least and an interval at most. Polling every round
// trip, hundreds of them took the CPU the late step needed; every quarter
// interval, 50 sidecars on 2 CPUs, once a stall made their steps late,
// spent their CPU on waking waiters and did not recover
// (docs/performance.md#shared-quota): the later the steps, the less the
// waiters may poll.
func (c *Client) nextLease(now time.Time) (wait time.Duration, overdue bool) {
	wait = time.Duration(c.nextStep.Load() - now.UnixNano())
	if wait < 0 {
		return min(max(-wait, overdueWait), Interval), true
	}
	if rtt := time.Duration(c.leaseRTT.Load()); rtt > 0 {
		wait += rtt + time.Millisecond
	}
	return max(wait, time.Millisecond), false
}

// WaitBuckets are the upper bounds of the admission-wait histogram
// (retry_sidecar_quota_admission_wait_seconds, docs/quota.md#metrics): from
// a send time on hand (0) through a wait for the next lease (about Interval) to
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
// for a send time: counts[i] waited at most WaitBuckets[i] and more than the
// bucket before, the last those that waited longer than every bound; sum is
// the time waited in all.
func (c *Client) AdmissionWaits() (counts [len(WaitBuckets) + 1]uint64, sum time.Duration) {
	for i := range c.waits {
		counts[i] = c.waits[i].Load()
	}
	return counts, time.Duration(c.waitSum.Load())
}

// kick leases at once when the send times ran out and the last lease operation
// is at least Interval old (after an idle spell): never more than one lease
// operation per Interval. It reports whether this call kicked one.
func (c *Client) kick(now time.Time) bool {
	if now.UnixNano()-c.lastOp.Load() < int64(Interval) || !c.kicked.CompareAndSwap(false, true) {
		return false
	}
	c.clk.AfterFunc(0, c.kickedStep)
	return true
}

// kickedStep is a step asked for by kick, unless a step ran meanwhile.
func (c *Client) kickedStep() {
	_ = c.step(false)
}

// Untake implements limits.Quota: the send time is on hand again for
// another attempt, within the same bounds.
func (c *Client) Untake(t limits.SendTime) {
	c.mu.Lock()
	c.hand.giveBack(t)
	c.mu.Unlock()
	c.admitted.Add(^uint64(0))
}

// Slots implements limits.Quota.
func (c *Client) Slots() *limits.Gate { return c.slots }

// HoldUntil implements limits.Quota.
func (c *Client) HoldUntil(now time.Time) time.Time {
	if u := c.hold.Load(); u > now.UnixNano() {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// Hold implements limits.Quota: the hold goes to the store with the next
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
	Admitted, Waited, Denied uint64 // attempts: took a send time; found none on hand; refused (Deny)
	Leased, Operations       uint64 // send times granted by the store; lease operations
	Tokens                   int64  // send times on hand now, still good
	Dropped                  int64  // send times gone unused
	State                    State
}

// Stats returns the counters (read at scrape time by the sidecar's metrics).
func (c *Client) Stats() Stats {
	c.mu.Lock()
	onHand, dropped := c.hand.count(c.clk.Now()), c.hand.dropped
	c.mu.Unlock()
	return Stats{Admitted: c.admitted.Load(), Waited: c.waited.Load(), Denied: c.denied.Load(),
		Leased: c.leased.Load(), Operations: c.ops.Load(), Tokens: onHand, Dropped: dropped, State: State(c.stateNow.Load())}
}

// step is one lease operation: it measures the demand since the last step,
// reports it with the slots in use, takes in what the store granted, and
// schedules the next step. An idle pod whose last operation is recent
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
	arrivals, due := c.arrivals.Swap(0), c.due.Swap(0)
	c.measure(now, arrivals, due)
	inUse, queued := 0, 0
	if c.slots != nil {
		inUse, queued = c.slots.InFlight(), c.slots.Queued()
	}
	busy := arrivals > 0 || inUse+queued > 0
	idle := !busy && due == 0 && c.leasedSlots == 0 && c.wantHold.Load() == 0
	if idle && c.state == StateReachable && now.Sub(time.Unix(0, c.lastOp.Load())) < IdleInterval-Interval/2 {
		c.schedule(now, Interval)
		return nil
	}
	c.mu.Lock()
	onHand := c.hand.count(now)
	c.mu.Unlock()
	req := LeaseRequest{Pod: c.pod.Name, Namespace: c.pod.Namespace, Want: Want(c.demand, onHand, due), Due: due,
		Demand: c.demand, InUse: int64(inUse)}
	if spec.Concurrency > 0 {
		req.Slots = SlotsWant(inUse, queued, spec.Concurrency, busy)
	}
	if h := c.wantHold.Load(); h > 0 {
		req.Hold = time.Unix(0, h)
	}
	c.lastOp.Store(now.UnixNano())
	c.ops.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), StoreTimeout)
	reply, err := c.store.Lease(ctx, spec, req)
	cancel()
	landed := c.clk.Now()
	c.leaseRTT.Store(int64(landed.Sub(now)))
	if c.obs.Lease != nil {
		c.obs.Lease(spec.Name, landed.Sub(now), reply.Granted, err)
	}
	switch {
	case errors.Is(err, ErrLate):
		c.due.Add(due) // the store put the lease off: those attempts still wait
	case err != nil:
		c.lost(now, spec, err)
	default:
		c.apply(now, landed, spec, req, reply)
	}
	c.schedule(now, Interval)
	return err
}

// measure folds the attempts since the last step into the demand: the new
// ones per second, or, if more, the attempts waiting for a send time (due:
// each asks once per lease) as if they were to start within a second. An
// app whose workers wait for the quota sends no new attempts meanwhile:
// without its backlog its claim on the rate would fall to what it was
// granted, and stay there (the seed plan's fleet of 10 pods shed 91 of 600
// requests). Over a second, not a lease: an open-loop pod's backlog is its
// excess demand over its deadline, larger beside the arrivals of a quiet pod
// than of a busy one, and counted per lease it took the busy pod's share.
func (c *Client) measure(now time.Time, arrivals, due int64) {
	if !c.lastStep.IsZero() {
		// Arrivals count over at least an interval: a step kicked just
		// after an idle one (at the same instant on a virtual clock) would
		// read one arrival 50 µs later as 20,000/s, or drop it at dt 0.
		inst := max(float64(arrivals)/max(now.Sub(c.lastStep), Interval).Seconds(), float64(due)/time.Second.Seconds())
		if c.demand == 0 {
			c.demand = inst // the first demand seen is not halved
		} else {
			c.demand = (c.demand + inst) / 2
		}
	}
	c.lastStep = now
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

// apply takes in a successful lease operation, sent at sent and answered
// at landed. The reply's send times are relative to the store's now, which
// lies between the two: put on landed, a send time is never early; its
// lateness counted from sent, it is never good for longer than the store
// allows.
func (c *Client) apply(sent, landed time.Time, spec Spec, req LeaseRequest, r LeaseReply) {
	if r.Granted > 0 {
		c.mu.Lock()
		c.hand.add(run{next: landed.Add(r.First), spacing: r.Spacing, left: r.Granted,
			lateness: max(r.Lateness-landed.Sub(sent), 0)})
		c.mu.Unlock()
		c.leased.Add(uint64(r.Granted))
	}
	c.share, c.pods, c.leasedSlots = r.Rate, r.Pods, r.Slots
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
// once per loss. The send times on hand stay good until their time is past.
func (c *Client) lost(now time.Time, spec Spec, err error) {
	s := StateUnreachable
	switch {
	case errors.Is(err, ErrRevoked):
		c.revoke(spec, err)
		return
	case errors.Is(err, ErrRefused):
		s = StateRefused
	}
	if c.state == StateReachable || c.state == StateConnecting {
		fb := FallbackFor(spec.OnStoreLoss, spec, c.share, c.pods)
		l := &fallbackLimiter{deny: fb.Deny}
		if !fb.Deny {
			l.lim = rate.NewLimiter(rate.Limit(fb.Rate), fb.Burst)
			l.lim.AllowN(now, fb.Burst) // no burst on top of the send times on hand
		}
		c.fallback.Store(l)
		if c.slots != nil {
			c.slots.SetConfig(slotGate(fallbackSlots(spec, fb, c.pods, c.slots.InFlight())))
		}
	}
	c.setState(s, spec, err)
}

// revoke takes in an answer that the pod may not draw any more: the send
// times and slots on hand are dropped and every attempt is denied until a lease
// succeeds again, whatever onStoreLoss says. A revoked namespace's share
// goes back to the others with their next lease: sending on at a last share
// would spend it twice.
func (c *Client) revoke(spec Spec, err error) {
	c.mu.Lock()
	c.hand = onHand{}
	c.mu.Unlock()
	c.fallback.Store(&fallbackLimiter{deny: true})
	if c.slots != nil {
		c.slots.SetConfig(slotGate(0))
	}
	c.setState(StateRevoked, spec, err)
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
