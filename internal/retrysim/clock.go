// Package retrysim runs pkg/retrypolicy on a virtual clock: Simulate plays one
// logical request against scripted upstream responses through the sidecar's own
// proxy and Transport, and Rehearse runs many logical requests against a
// simulated quota-limited upstream. Nothing really waits: minutes of virtual
// time take milliseconds. See docs/kubectl-retry.md.
package retrysim

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Clock is a virtual clock: time moves only when its driver calls Advance,
// AdvanceTo or Next, and timers fire (their channel is sent to, or their
// function is called) in time order, ties in creation order, on the goroutine
// that moves the clock. It implements clock.WithDelayedExecution, so it can be
// given to retrypolicy.Transport.Clock. Safe for concurrent use, but meant for
// one driver.
type Clock struct {
	// BeforeFire, if set, runs before each timer fires, without the lock (the
	// rehearsal scheduler settles its goroutines there).
	BeforeFire func()

	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
}

var _ clock.WithDelayedExecution = (*Clock)(nil)

// NewClock returns a clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now implements clock.PassiveClock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since implements clock.PassiveClock.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// After implements clock.Clock.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// NewTimer implements clock.Clock.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	c.arm(t, d)
	return t
}

// AfterFunc implements clock.WithDelayedExecution: f runs on the goroutine that
// moves the clock past the timer.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &timer{c: c, fn: f}
	c.arm(t, d)
	return t
}

// Tick implements clock.Clock with a ticker that re-arms itself.
func (c *Clock) Tick(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	t := &timer{c: c, ch: make(chan time.Time, 1), period: d}
	c.arm(t, d)
	return t.ch
}

// Sleep implements clock.Clock by moving the clock: it is only meaningful for a
// single-goroutine driver (Simulate).
func (c *Clock) Sleep(d time.Duration) { c.Advance(d) }

// Advance moves the clock forward by d, firing every timer due on the way.
func (c *Clock) Advance(d time.Duration) {
	c.AdvanceTo(c.Now().Add(d))
}

// AdvanceTo moves the clock to t (never backwards), firing every timer due at
// or before t, each at its own time.
func (c *Clock) AdvanceTo(t time.Time) {
	for {
		if c.BeforeFire != nil {
			c.BeforeFire()
		}
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return
		}
		c.fireNextLocked() // unlocks
	}
}

// Next moves the clock to the earliest pending timer and fires it (and every
// other timer due at that instant). It reports false, without moving, when no
// timer is pending.
func (c *Clock) Next() bool {
	c.mu.Lock()
	if len(c.timers) == 0 {
		c.mu.Unlock()
		return false
	}
	when := c.timers[0].when
	c.mu.Unlock()
	c.AdvanceTo(when)
	return true
}

// NextAt is the time of the earliest pending timer, if any.
func (c *Clock) NextAt() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].when, true
}

// fireNextLocked pops the earliest timer, sets now to its time and fires it
// with the lock released (its function may use the clock).
func (c *Clock) fireNextLocked() {
	t := heap.Pop(&c.timers).(*timer)
	t.index = -1
	if t.when.After(c.now) {
		c.now = t.when
	}
	now := c.now
	if t.period > 0 {
		t.when = now.Add(t.period)
		c.seq++
		t.seq = c.seq
		heap.Push(&c.timers, t)
	}
	c.mu.Unlock()
	if t.fn != nil {
		t.fn()
		return
	}
	select {
	case t.ch <- now:
	default: // a ticker whose reader is behind drops ticks, like time.Ticker
	}
}

func (c *Clock) arm(t *timer, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.when = c.now.Add(max(d, 0))
	c.seq++
	t.seq = c.seq
	heap.Push(&c.timers, t)
}

type timer struct {
	c      *Clock
	ch     chan time.Time
	fn     func()
	when   time.Time
	seq    uint64
	period time.Duration
	index  int // in the heap; -1 when not pending
}

func (t *timer) C() <-chan time.Time { return t.ch }

// Stop reports whether the timer was still pending.
func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&c.timers, t.index)
	t.index = -1
	return true
}

// Reset re-arms the timer d from now and reports whether it was pending.
func (t *timer) Reset(d time.Duration) bool {
	was := t.Stop()
	t.c.arm(t, d)
	return was
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
