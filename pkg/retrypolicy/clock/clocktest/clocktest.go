// Package clocktest provides a virtual clock for tests of code that uses
// package retrypolicy (and for simulations such as kubectl-retry's): time moves
// only when the test says so, so retries, backoff, Retry-After waits and
// timeouts are tested without sleeping. See docs/library.md#clocks.
//
//	clk := clocktest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
//	tr := &retryhttp.Transport{Route: retryhttp.Static(p), Clock: clk}
//	go func() { resp, err = client.Do(req) }()
//	// wait until the Transport sleeps (clk.Pending() > 0), then:
//	clk.Advance(2 * time.Second) // the backoff timer fires, the retry is sent
package clocktest

import (
	"container/heap"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Clock is a virtual clock: time moves only when its driver calls Advance,
// AdvanceTo or Next, and timers fire (their channel is sent to, or their
// function is called) in time order, ties in creation order, each at its own
// time, on the goroutine that moves the clock and without the clock's lock
// held (a timer's function may use the clock). Safe for concurrent use, but
// meant for one driver: two goroutines moving the clock at once may fire two
// timers out of order.
type Clock struct {
	// BeforeFire, if set, runs before each timer fires, without the lock (a
	// scheduler of simulated goroutines lets them settle there). Set it before
	// the clock is first moved.
	BeforeFire func()

	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements clock.Clock: the timer fires when the clock is moved to
// or past now+d.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	c.arm(t, d)
	return t
}

// AfterFunc implements clock.Clock: f runs on the goroutine that moves the
// clock to or past now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &timer{c: c, fn: f}
	c.arm(t, d)
	return t
}

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

// Pending is the number of timers that have not fired and were not stopped. A
// test that runs the code under test on another goroutine waits for Pending to
// grow before it moves the clock, so that the timer it means to fire exists.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
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
	c.mu.Unlock()
	if t.fn != nil {
		t.fn()
		return
	}
	t.ch <- now // capacity 1, and a timer fires once
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
	c     *Clock
	ch    chan time.Time
	fn    func()
	when  time.Time
	seq   uint64
	index int // in the heap; -1 when not pending
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

// TimerSet reports whether the code under test has set a timer on c: the
// condition to WaitFor before Advance.
func (c *Clock) TimerSet() bool { return c.Pending() > 0 }

// WaitFor yields until cond holds, for a test whose code under test runs on
// another goroutine and is about to block on the clock (a timer, a queue). It
// fails t after a million yields, naming what it waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1_000_000; i++ {
		if cond() {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("timed out waiting for %s", what)
}
