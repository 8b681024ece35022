package limits

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// PacingConfig is quota-aware pacing (docs/pacing.md): holding an upstream
// that said when it will have capacity again. Both are off by default.
type PacingConfig struct {
	// RateLimitHeaders: a response whose rate-limit headers announce remaining 0
	// with reset R holds the upstream until R (see internal/ratelimitheader).
	RateLimitHeaders bool
	// HoldOnDeferral: a response that was deferred (its hint exceeded maxWait or
	// the deadline) holds the upstream until its Not-Before.
	HoldOnDeferral bool
}

// Enabled reports whether the upstream is paced at all.
func (c PacingConfig) Enabled() bool { return c.RateLimitHeaders || c.HoldOnDeferral }

// HoldReason says why an upstream is held; its String is the log and metric value.
type HoldReason uint8

// The reasons for a hold.
const (
	HoldNone      HoldReason = iota
	HoldRateLimit            // a response announced remaining 0 with a reset
	HoldDeferral             // a response was deferred (holdOnDeferral)
)

func (r HoldReason) String() string {
	switch r {
	case HoldRateLimit:
		return "rate-limit"
	case HoldDeferral:
		return "deferral"
	}
	return "none"
}

// ErrHeld is returned by Pacer.Wait when the caller's deadline does not allow it
// to wait until the hold ends: it is answered locally, nothing is sent.
var ErrHeld = errors.New("retrypolicy: upstream held until its quota returns")

// Pacer holds one upstream: while a hold is in force no attempt starts before
// it ends. Callers whose time allows wait in arrival order (a ticketed FIFO:
// when the hold ends only the oldest waiter is woken, and each waiter wakes the
// next as it leaves, so there is no thundering herd and the order is kept);
// the others are refused at once with the hold's end. A hold that is extended
// refuses the waiters it would now make late. Safe for concurrent use; the path
// taken when no hold is in force is one atomic load.
//
//	t   event                                         state
//	0s  HoldAt(until 3s)                              held until 3s, timer set
//	1s  Wait(maxWait 5s)  → queued (A)                A waits
//	1s  Wait(maxWait 1s)  → ErrHeld, until 3s         answered locally
//	2s  Wait(maxWait 9s)  → queued (B)                A, B wait
//	3s  timer: hold ends, A woken; A wakes B          A then B start, in order
type Pacer struct {
	active atomic.Bool // a hold is in force or callers are queued

	mu     sync.Mutex
	until  time.Time // zero: no hold
	reason HoldReason
	gen    uint64 // counts holds and extensions; a timer ends only its own
	queue  []*paceWaiter
	timer  clock.Timer
	notify HoldNotify
}

// HoldNotify is told when a hold starts (or moves later: start true) and when
// it ends (start false). It is called with the pacer's lock held, so the calls
// arrive in order; it must be fast and must not call the Pacer.
type HoldNotify func(start bool, until time.Time, reason HoldReason)

type paceWaiter struct {
	ch     chan struct{}
	latest time.Time // the latest start its deadline allows
	state  waiterState
}

type waiterState uint8

const (
	waiting waiterState = iota
	granted
	refused
)

// newPacer returns a pacer with no hold.
func newPacer() *Pacer { return &Pacer{} }

// Hold returns the end and reason of the hold in force (zero time and HoldNone
// if none; a hold whose end has passed is reported until its timer has run).
func (p *Pacer) Hold() (time.Time, HoldReason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.until, p.reason
}

// Active reports whether a hold is in force or callers are queued, with one
// atomic load: when it is false, Wait returns at once without reading the
// clock, so a caller may skip even its own clock reading.
func (p *Pacer) Active() bool { return p.active.Load() }

// Queued reports how many callers are waiting for the hold to end.
func (p *Pacer) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// HoldAt holds the upstream until `until` (as measured on clk), starting a hold
// or extending the one in force; it never shortens a hold. It returns true when
// the hold started or moved later, false when nothing changed (until is not
// after now, or not after the hold in force). notify, if not nil, is told of
// the start now and of the end later (on the timer's goroutine).
// Waiters whose deadline does not reach the new end are refused.
func (p *Pacer) HoldAt(now time.Time, clk clock.Clock, until time.Time, reason HoldReason,
	notify HoldNotify) bool {
	if !until.After(now) {
		return false
	}
	p.mu.Lock()
	if !p.until.IsZero() && !until.After(p.until) {
		p.mu.Unlock()
		return false
	}
	p.until, p.reason, p.notify = until, reason, notify
	if notify != nil {
		notify(true, until, reason)
	}
	p.gen++
	gen := p.gen
	p.active.Store(true)
	old := p.timer
	p.timer = nil
	live := p.queue[:0]
	for _, w := range p.queue {
		if w.latest.Before(until) {
			w.state = refused
			close(w.ch)
			continue
		}
		live = append(live, w)
	}
	clear(p.queue[len(live):])
	p.queue = live
	p.mu.Unlock()

	// Timers are set and stopped outside the lock: a clock may run expire while
	// holding its own lock (the fake clock of tests does). A timer of an older
	// generation that fires anyway does nothing.
	if old != nil {
		old.Stop()
	}
	t := clk.AfterFunc(until.Sub(now), func() { p.expire(gen) })
	p.mu.Lock()
	if p.gen == gen {
		p.timer = t
		t = nil
	}
	p.mu.Unlock()
	if t != nil {
		t.Stop() // a newer hold set its own timer meanwhile
	}
	return true
}

// expire ends hold number gen and lets the oldest waiter go. It runs on the
// timer (a fake clock runs it inside Step, so it must not read the clock).
func (p *Pacer) expire(gen uint64) {
	p.mu.Lock()
	if p.until.IsZero() || gen != p.gen {
		p.mu.Unlock()
		return // extended meanwhile: a newer timer will end it
	}
	if p.notify != nil {
		p.notify(false, p.until, p.reason)
	}
	p.until, p.reason, p.notify, p.timer = time.Time{}, HoldNone, nil, nil
	p.grantNextLocked()
	p.mu.Unlock()
}

// grantNextLocked wakes the oldest waiter, if any, and clears active when
// nothing is held or queued any more.
func (p *Pacer) grantNextLocked() {
	if len(p.queue) > 0 {
		w := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		w.state = granted
		close(w.ch)
	}
	if p.until.IsZero() && len(p.queue) == 0 {
		p.active.Store(false)
	}
}

// heldLocked reports whether a hold is in force at now.
func (p *Pacer) heldLocked(now time.Time) bool {
	return !p.until.IsZero() && now.Before(p.until)
}

// Wait returns when the caller may start an attempt. maxWait is how long the
// caller can afford to wait (its remaining deadline minus the attempt's
// reserve). It returns:
//
//	nil, queued false     no hold, nobody waiting: go at once (one atomic load)
//	nil, queued true      waited in line until the hold ended: go now
//	ErrHeld, until        the hold ends too late for the caller: answer locally
//	ctx.Err()             the caller gave up while waiting
func (p *Pacer) Wait(ctx context.Context, clk clock.Clock, maxWait time.Duration) (until time.Time, queued bool, err error) {
	if !p.active.Load() {
		return time.Time{}, false, nil
	}
	p.mu.Lock()
	now := clk.Now()
	held := p.heldLocked(now)
	if !held && len(p.queue) == 0 {
		p.mu.Unlock()
		return time.Time{}, false, nil // the hold ended; its timer is about to run
	}
	if held && p.until.Sub(now) > maxWait {
		until := p.until
		p.mu.Unlock()
		return until, false, ErrHeld
	}
	w := &paceWaiter{ch: make(chan struct{}), latest: now.Add(maxWait)}
	p.queue = append(p.queue, w)
	p.mu.Unlock()
	for {
		select {
		case <-w.ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
		switch w.state {
		case refused:
			until := p.until
			p.mu.Unlock()
			return until, true, ErrHeld
		case granted:
			if now := clk.Now(); p.heldLocked(now) {
				// A new hold began as this waiter was woken: back to the head of
				// the line, or refused if it now ends too late.
				if p.until.After(w.latest) || ctx.Err() != nil {
					until := p.until
					p.mu.Unlock()
					if ctx.Err() != nil {
						return time.Time{}, true, ctx.Err()
					}
					return until, true, ErrHeld
				}
				w.state, w.ch = waiting, make(chan struct{})
				p.queue = append(p.queue, nil)
				copy(p.queue[1:], p.queue)
				p.queue[0] = w
				p.mu.Unlock()
				continue
			}
			p.grantNextLocked() // pass the turn on, whatever this caller does now
			p.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return time.Time{}, true, err
			}
			return time.Time{}, true, nil
		default: // still waiting: the caller gave up
			for i, q := range p.queue {
				if q == w {
					p.queue = append(p.queue[:i], p.queue[i+1:]...)
					break
				}
			}
			if p.until.IsZero() && len(p.queue) == 0 {
				p.active.Store(false)
			}
			p.mu.Unlock()
			return time.Time{}, true, ctx.Err()
		}
	}
}
