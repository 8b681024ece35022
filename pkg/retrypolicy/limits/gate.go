package limits

import (
	"context"
	"errors"
	"sync"
	"time"

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

// NewGate returns an idle gate.
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
	// The queue wait starts, and its timer is armed, before the waiter is
	// visible: a Release seen by another goroutine as soon as Queued counts
	// this waiter must not land before the wait began (it would read 0).
	queued := clk.Now()
	t := clk.NewTimer(wait)
	defer t.Stop()
	w := &waiter{ch: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.queued++
	g.mu.Unlock()
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
