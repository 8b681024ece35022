// Package limits is the runtime state of an upstream's limits, which a
// retrying executor consults before each attempt: the outage budget (R6), the
// start-rate limiter and the concurrency gate (R7), the pacer that holds an
// upstream (docs/pacing.md) and a fleet-wide Quota (docs/quota.md).
//
// A retrypolicy.Policy compiles one State from its Config and a
// retrypolicy.Registry keeps it across reloads; package retryhttp's
// Transport asks it (State.Admit, Budget, Pacer) before each attempt. Use it
// directly to write another executor, to read an upstream's occupancy
// (State.InFlight, State.Queued), or to implement Quota over a store of your
// own. Everything here is safe for concurrent use and takes its time from an
// injected clock.
package limits

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// State is the long-lived runtime state of one upstream: outage budget, start
// rate limiter, concurrency gate and pacer (nil parts are unlimited). A Registry keeps
// one per upstream name across config reloads and binds it to each newly compiled
// Policy, so counts, tokens and in-flight slots are not reset by a reload.
type State struct {
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

// Config are the limits of one upstream, from its compiled policy.
type Config struct {
	Budget      *BudgetConfig      // nil = no outage budget
	RateLimit   *RateLimitConfig   // nil = unlimited
	Concurrency *ConcurrencyConfig // nil = unlimited
	Pacing      PacingConfig
	Quota       Quota // nil = none (docs/quota.md)
}

// New returns a fresh State for c.
func New(c Config) *State {
	l := &State{}
	l.Reconfigure(time.Now(), c)
	return l
}

// Reconfigure applies c in place: existing parts keep their state.
func (l *State) Reconfigure(now time.Time, c Config) {
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
			next.budget = newBudget(*c.Budget)
		} else {
			next.budget.setConfig(*c.Budget)
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
			next.pacer = newPacer()
		}
	}
	l.parts.Store(&next)
}

// Budget is the upstream's outage budget, nil if none.
func (l *State) Budget() *Budget { return l.parts.Load().budget }

// Gate is the upstream's concurrency gate, nil if unlimited.
func (l *State) Gate() *Gate { return l.parts.Load().gate }

// Pacer is the upstream's quota-aware pacer, nil if pacing is off.
func (l *State) Pacer() *Pacer { return l.parts.Load().pacer }

// Quota is the fleet-wide quota the upstream draws on, nil if none.
func (l *State) Quota() Quota { return l.parts.Load().quota }

// Limiter is the upstream's start-rate limiter, nil if unlimited.
func (l *State) Limiter() *rate.Limiter { return l.parts.Load().limiter }

// InFlight is the number of attempts to the upstream admitted and not yet
// released, limited or not (the sidecar's in-flight gauge).
func (l *State) InFlight() int { return int(l.inFlight.Load()) }

// Queued is the number of callers waiting in Admit: for a start token of the
// rate limiter or in the concurrency gate's queue (the sidecar's queued gauge).
func (l *State) Queued() int {
	n := int(l.pacing.Load())
	if g := l.parts.Load().gate; g != nil {
		n += g.Queued()
	}
	return n
}
