// Package admission is the long-lived runtime state of an upstream that a
// retrying executor (pkg/retrypolicy/retryhttp) consults before each attempt:
// outage budget, start-rate limiter, concurrency gate and pacer (R6, R7,
// docs/pacing.md). pkg/retrypolicy's Policy carries one Limits, and its
// Registry keeps them across reloads; nothing here is part of the library's
// public API.
package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// ErrShed is returned by Admit when an attempt is refused for lack of capacity.
var ErrShed = errors.New("retrypolicy: shed: no capacity")

// Gate bounds attempts in flight for one upstream, with a bounded FIFO queue
// (R7). A caller that finds all slots busy queues if fewer than MaxQueued are
// waiting, for at most min(QueueTimeout, its own remaining time); otherwise it is
// shed at once. A slot is handed straight to the oldest waiter when an attempt
// really ends (Release), not when its caller stops waiting. Nothing in a Gate
// grows without bound. Safe for concurrent use.
type Gate struct {
	mu       sync.Mutex
	cfg      ConcurrencyConfig
	inFlight int
	queue    []*waiter // FIFO; entries that gave up are marked gone
	queued   int       // waiters not gone
	avgHold  time.Duration
}

type waiter struct {
	ch      chan struct{}
	granted bool
	gone    bool
}

// newGate returns an idle gate.
func NewGate(cfg ConcurrencyConfig) *Gate { return &Gate{cfg: cfg} }

// SetConfig changes the limits in place; attempts in flight and waiters are kept
// (config reload). A raised MaxInFlight lets queued waiters in at once.
func (g *Gate) SetConfig(cfg ConcurrencyConfig) {
	g.mu.Lock()
	g.cfg = cfg
	for g.inFlight < g.cfg.MaxInFlight && g.grantLocked() {
		g.inFlight++
	}
	g.mu.Unlock()
}

// InFlight and Queued report the current occupancy (for tests and metrics).
func (g *Gate) InFlight() int { g.mu.Lock(); defer g.mu.Unlock(); return g.inFlight }

// Queued reports how many callers are waiting for a slot.
func (g *Gate) Queued() int { g.mu.Lock(); defer g.mu.Unlock(); return g.queued }

// TryAcquire takes a slot if one is free and nobody is queued (FIFO fairness).
func (g *Gate) TryAcquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight < g.cfg.MaxInFlight && g.queued == 0 {
		g.inFlight++
		return true
	}
	return false
}

// Acquire takes a slot, queueing for at most min(QueueTimeout, maxWait) on clk;
// it sheds at once when the queue is full or the expected queue wait is longer
// than maxWait.
// It returns nil with a slot held and the time it queued for it (0: a slot
// was free), ErrShed with the estimated time until capacity returns, or the
// context's error if the caller gave up while queued.
func (g *Gate) Acquire(ctx context.Context, clk clock.Clock, maxWait time.Duration) (time.Duration, error) {
	g.mu.Lock()
	if g.inFlight < g.cfg.MaxInFlight && g.queued == 0 {
		g.inFlight++
		g.mu.Unlock()
		return 0, nil
	}
	wait := min(g.cfg.QueueTimeout, maxWait)
	if g.queued >= g.cfg.MaxQueued || wait <= 0 || g.expectedWaitLocked() > maxWait {
		ra := g.capacityReturnsLocked()
		g.mu.Unlock()
		return ra, ErrShed
	}
	w := &waiter{ch: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.queued++
	g.mu.Unlock()

	queued := clk.Now()
	t := clk.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ch:
		return clk.Now().Sub(queued), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C():
		err = ErrShed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted { // the slot arrived as we gave up: keep it if only the timer fired
		if errors.Is(err, ErrShed) {
			return clk.Now().Sub(queued), nil
		}
		g.releaseLocked(0)
		return 0, err
	}
	w.gone = true
	g.queued--
	g.compactLocked()
	if errors.Is(err, ErrShed) {
		return g.capacityReturnsLocked(), ErrShed
	}
	return 0, err
}

// Release returns a slot when an attempt really ended; held is how long it was
// in flight (feeds the estimate of when capacity returns).
func (g *Gate) Release(held time.Duration) {
	g.mu.Lock()
	g.releaseLocked(held)
	g.mu.Unlock()
}

func (g *Gate) releaseLocked(held time.Duration) {
	if held > 0 {
		if g.avgHold == 0 {
			g.avgHold = held
		} else {
			g.avgHold += (held - g.avgHold) / 8
		}
	}
	if g.inFlight <= g.cfg.MaxInFlight && g.grantLocked() {
		return // handed over: inFlight unchanged
	}
	g.inFlight--
}

// grantLocked hands a slot to the oldest live waiter; false if there is none.
func (g *Gate) grantLocked() bool {
	for len(g.queue) > 0 {
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		if w.gone {
			continue
		}
		w.granted = true
		g.queued--
		close(w.ch)
		return true
	}
	return false
}

// compactLocked drops gone waiters from the front so the slice stays bounded by
// MaxQueued live entries plus the ones that gave up behind the head.
func (g *Gate) compactLocked() {
	if len(g.queue) > 2*g.cfg.MaxQueued+8 {
		live := g.queue[:0]
		for _, w := range g.queue {
			if !w.gone {
				live = append(live, w)
			}
		}
		clear(g.queue[len(live):])
		g.queue = live
	}
}

// expectedWaitLocked is how long a new caller would expect to queue: the
// estimate from the hold times seen so far, or, before any attempt has ended,
// the whole QueueTimeout. A caller that cannot afford it is shed at once
// rather than queued only to be shed at its deadline (R7).
func (g *Gate) expectedWaitLocked() time.Duration {
	if g.avgHold <= 0 {
		return g.cfg.QueueTimeout
	}
	ahead := g.queued + 1
	return time.Duration(int64(g.avgHold) * int64(ahead) / int64(max(g.cfg.MaxInFlight, 1)))
}

// capacityReturnsLocked estimates when a slot will be free for a new caller:
// the average hold time times the attempts ahead of it per slot, at least 1s.
func (g *Gate) capacityReturnsLocked() time.Duration {
	hold := g.avgHold
	if hold <= 0 {
		hold = time.Second
	}
	ahead := g.queued + 1
	return max(time.Duration(int64(hold)*int64(ahead)/int64(max(g.cfg.MaxInFlight, 1))), time.Second)
}

// Limits is the long-lived runtime state of one upstream: outage budget, start
// rate limiter, concurrency gate and pacer (nil parts are unlimited). A Registry keeps
// one per upstream name across config reloads and binds it to each newly compiled
// Policy, so counts, tokens and in-flight slots are not reset by a reload.
type Limits struct {
	mu    sync.Mutex // serialises reconfigure
	parts atomic.Pointer[limitParts]

	inFlight atomic.Int64 // admitted attempts not yet released
	pacing   atomic.Int64 // callers sleeping for a start token
}

type limitParts struct {
	budget  *Budget
	limiter *rate.Limiter
	gate    *Gate
	pacer   *Pacer
	quota   Quota
}

// BudgetConfig is the outage budget (R6): over a sliding 10 s window, retries may
// be at most RetryPercent % of first attempts plus MinRetriesPerSecond·10.
type BudgetConfig struct {
	RetryPercent        int
	MinRetriesPerSecond int
}

// RateLimitConfig bounds attempt starts, retries included. It is already divided
// per pod by the controller.
type RateLimitConfig struct {
	RequestsPerSecond float64
	Burst             int
}

// ConcurrencyConfig bounds attempts in flight, with a bounded FIFO queue whose
// waiters each wait at most QueueTimeout.
type ConcurrencyConfig struct {
	MaxInFlight, MaxQueued int
	QueueTimeout           time.Duration
}

// Settings are the limits of one upstream, from its compiled policy.
type Settings struct {
	Budget      *BudgetConfig      // nil = no outage budget
	RateLimit   *RateLimitConfig   // nil = unlimited
	Concurrency *ConcurrencyConfig // nil = unlimited
	Pacing      PacingConfig
	Quota       Quota // nil = none (docs/quota.md)
}

// New returns fresh Limits for c.
func New(c Settings) *Limits {
	l := &Limits{}
	l.Reconfigure(time.Now(), c)
	return l
}

// Reconfigure applies c in place: existing parts keep their state.
func (l *Limits) Reconfigure(now time.Time, c Settings) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var cur limitParts
	if p := l.parts.Load(); p != nil {
		cur = *p
	}
	next := limitParts{}
	if c.Budget != nil {
		next.budget = cur.budget
		if next.budget == nil {
			next.budget = NewBudget(*c.Budget)
		} else {
			next.budget.SetConfig(*c.Budget)
		}
	}
	if c.RateLimit != nil {
		next.limiter = cur.limiter
		if next.limiter == nil {
			next.limiter = rate.NewLimiter(rate.Limit(c.RateLimit.RequestsPerSecond), c.RateLimit.Burst)
		} else {
			next.limiter.SetLimitAt(now, rate.Limit(c.RateLimit.RequestsPerSecond))
			next.limiter.SetBurstAt(now, c.RateLimit.Burst)
		}
	}
	if c.Concurrency != nil {
		next.gate = cur.gate
		if next.gate == nil {
			next.gate = NewGate(*c.Concurrency)
		} else {
			next.gate.SetConfig(*c.Concurrency)
		}
	}
	next.quota = c.Quota
	if c.Pacing.Enabled() || c.Quota != nil {
		// A quota's fleet-wide hold is applied through the pacer too.
		next.pacer = cur.pacer // a hold in force outlives the reload
		if next.pacer == nil {
			next.pacer = NewPacer()
		}
	}
	l.parts.Store(&next)
}

// Budget is the upstream's outage budget, nil if none.
func (l *Limits) Budget() *Budget { return l.parts.Load().budget }

// Gate is the upstream's concurrency gate, nil if unlimited.
func (l *Limits) Gate() *Gate { return l.parts.Load().gate }

// Pacer is the upstream's quota-aware pacer, nil if pacing is off.
func (l *Limits) Pacer() *Pacer { return l.parts.Load().pacer }

// Quota is the fleet-wide quota the upstream draws on, nil if none.
func (l *Limits) Quota() Quota { return l.parts.Load().quota }

// Limiter is the upstream's start-rate limiter, nil if unlimited.
func (l *Limits) Limiter() *rate.Limiter { return l.parts.Load().limiter }

// InFlight is the number of attempts to the upstream admitted and not yet
// released, limited or not (the sidecar's in-flight gauge).
func (l *Limits) InFlight() int { return int(l.inFlight.Load()) }

// Queued is the number of callers waiting in Admit: for a start token of the
// rate limiter or in the concurrency gate's queue (the sidecar's queued gauge).
func (l *Limits) Queued() int {
	n := int(l.pacing.Load())
	if g := l.parts.Load().gate; g != nil {
		n += g.Queued()
	}
	return n
}

// Sleeper waits d, returning at once with the context's error if ctx ends first.
type Sleeper func(ctx context.Context, d time.Duration) error

// Ticket is an admitted attempt. Release it exactly once when the attempt really
// ends (its response body closed, or its error returned). The zero Ticket holds
// nothing.
type Ticket struct {
	// Waited is how long admission made the attempt wait, and for what.
	Waited Waits

	lim   *Limits
	gate  *Gate
	slots *Gate // of the quota
	start time.Time
}

// Waits are the waits of one admission, by the gate that made the attempt
// wait (docs/observability.md#tracing names them retry.reason rate_limit,
// quota and queue). Each is measured on the clock Admit was given.
type Waits struct {
	RateLimit time.Duration // for a start token of the rate limiter
	Quota     time.Duration // for a token, then a fleet-wide slot, of the shared quota
	Queue     time.Duration // in the concurrency gate's queue
}

// Release returns the in-flight slots, if the attempt held any.
func (t Ticket) Release(now time.Time) {
	if t.lim != nil {
		t.lim.inFlight.Add(-1)
	}
	if t.gate != nil {
		t.gate.Release(now.Sub(t.start))
	}
	if t.slots != nil {
		t.slots.Release(now.Sub(t.start))
	}
}

// Admit asks permission to start one attempt (R7). maxWait is how long the
// caller can afford to wait in total (its remaining deadline minus the attempt's
// reserve). First a start token: if the limiter can give one within maxWait the
// caller sleeps until then (sleep ends at once on cancellation), else it is shed
// with the exact time the token would come. Then a token of the shared quota,
// if any (docs/quota.md): taken locally, waiting for the next lease while
// maxWait allows. Then an in-flight slot from the Gate, and one of the quota's
// fleet-wide slots. It returns the Ticket, whose Waited says which of them
// made the attempt wait and how long; or ErrShed with the time until capacity
// returns (for the 503's Retry-After), ErrQuotaDenied with the time until the
// request may be sent again, or the context's error.
//
// The rate wait needs no queue of its own: every waiter has reserved a distinct
// future token, so at most burst + rate·maxWait callers can be waiting, and a
// caller that would wait past its deadline is shed, not queued.
func (l *Limits) Admit(ctx context.Context, clk clock.Clock, sleep Sleeper, maxWait time.Duration) (Ticket, time.Duration, error) {
	parts := l.parts.Load()
	lim, gate, q := parts.limiter, parts.gate, parts.quota
	var token *rate.Reservation
	var tokenAt time.Time // when the token was due
	var waited Waits
	giveBack := func() {
		// The attempt never started: its start tokens go back. Cancelling as of
		// the time it was due restores it even after the wait for it.
		if token != nil {
			token.CancelAt(tokenAt)
		}
	}
	if lim != nil {
		now := clk.Now()
		r := lim.ReserveN(now, 1)
		if !r.OK() {
			return Ticket{}, time.Second, ErrShed
		}
		token, tokenAt = r, now
		if d := r.DelayFrom(now); d > 0 {
			if d > maxWait {
				r.CancelAt(now)
				return Ticket{}, d, ErrShed
			}
			l.pacing.Add(1)
			err := sleep(ctx, d)
			l.pacing.Add(-1)
			if err != nil {
				r.CancelAt(clk.Now())
				return Ticket{}, 0, err
			}
			maxWait -= d
			tokenAt = now.Add(d)
			waited.RateLimit = d
		}
	}
	if q != nil {
		l.pacing.Add(1)
		spent, ra, err := takeQuota(ctx, q, clk, sleep, clk.Now(), maxWait)
		l.pacing.Add(-1)
		if err != nil {
			giveBack()
			return Ticket{}, ra, err
		}
		maxWait -= spent
		waited.Quota = spent
	}
	t := Ticket{lim: l}
	if gate != nil {
		d, err := gate.Acquire(ctx, clk, maxWait)
		if err != nil {
			giveBack()
			if q != nil {
				q.Untake()
			}
			return Ticket{}, d, err
		}
		t.gate = gate
		maxWait -= d
		waited.Queue = d
	}
	if q != nil {
		if slots := q.Slots(); slots != nil {
			d, err := slots.Acquire(ctx, clk, maxWait)
			if err != nil {
				if t.gate != nil {
					t.gate.Release(0)
				}
				giveBack()
				q.Untake()
				return Ticket{}, d, err
			}
			t.slots = slots
			waited.Quota += d
		}
	}
	t.Waited = waited
	l.inFlight.Add(1)
	if t.gate != nil || t.slots != nil {
		t.start = clk.Now()
	}
	return t, 0, nil
}
