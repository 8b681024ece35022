package limits

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

type holdEnd struct {
	until  time.Time
	reason HoldReason
}

// TestPacerHoldStartsAndEndsOnTheClock: a hold is in force until its end on the
// injected clock, is extended but never shortened, and reports its end once.
func TestPacerHoldStartsAndEndsOnTheClock(t *testing.T) {
	clk := clocktest.NewClock(now)
	p := newPacer()
	ends := make(chan holdEnd, 4)
	starts := 0
	onEnd := func(start bool, u time.Time, r HoldReason) {
		if start {
			starts++
			return
		}
		ends <- holdEnd{u, r}
	}

	if p.HoldAt(now, clk, now, HoldRateLimit, onEnd) || p.Active() {
		t.Fatalf("a hold ending now started (active %v)", p.Active())
	}
	if !p.HoldAt(now, clk, now.Add(3*time.Second), HoldRateLimit, onEnd) || !p.Active() {
		t.Fatalf("a 3s hold did not start (active %v)", p.Active())
	}
	if p.HoldAt(now, clk, now.Add(2*time.Second), HoldDeferral, onEnd) {
		t.Fatal("a shorter hold replaced a longer one")
	}
	if u, r := p.Hold(); !u.Equal(now.Add(3*time.Second)) || r != HoldRateLimit {
		t.Fatalf("Hold = %v, %v; want now+3s, rate-limit", u, r)
	}
	clk.Advance(time.Second)
	if !p.HoldAt(clk.Now(), clk, now.Add(5*time.Second), HoldDeferral, onEnd) {
		t.Fatal("a longer hold did not extend the one in force")
	}
	clk.Advance(2 * time.Second) // now+3s: the first timer was replaced
	if u, _ := p.Hold(); !u.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("hold ended at its first end; still want now+5s, got %v", u)
	}
	select {
	case e := <-ends:
		t.Fatalf("hold reported ended early: %+v", e)
	default:
	}
	clk.Advance(2 * time.Second) // now+5s
	e := <-ends
	if !e.until.Equal(now.Add(5*time.Second)) || e.reason != HoldDeferral {
		t.Fatalf("end = %+v; want now+5s, deferral", e)
	}
	if u, r := p.Hold(); !u.IsZero() || r != HoldNone || p.Active() {
		t.Fatalf("after the end: Hold = %v, %v, active %v; want none", u, r, p.Active())
	}
	if _, queued, err := p.Wait(context.Background(), clk, time.Second); err != nil || queued {
		t.Fatalf("Wait with no hold = %v, queued %v; want go at once", err, queued)
	}
	if n := len(ends); n != 0 || starts != 2 {
		t.Fatalf("%d further end reports, %d start reports; want exactly one end, two starts (start, extension)", n, starts)
	}
}

// TestPacerWaitsOrAnswersByDeadline: a caller whose time reaches the hold's end
// waits; one whose time does not is refused at once with the end.
func TestPacerWaitsOrAnswersByDeadline(t *testing.T) {
	tests := map[string]struct {
		maxWait    time.Duration
		wantErr    error
		wantQueued bool
	}{
		"a caller with 5s to spare waits for a 3s hold":         {5 * time.Second, nil, true},
		"a caller with exactly 3s to spare waits":               {3 * time.Second, nil, true},
		"a caller with 2.9s to spare is answered at once":       {2900 * time.Millisecond, ErrHeld, false},
		"a caller with no time left at all is answered at once": {0, ErrHeld, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(now)
			p := newPacer()
			p.HoldAt(now, clk, now.Add(3*time.Second), HoldRateLimit, nil)
			type result struct {
				until  time.Time
				queued bool
				err    error
			}
			done := make(chan result, 1)
			go func() {
				u, q, err := p.Wait(context.Background(), clk, tc.maxWait)
				done <- result{u, q, err}
			}()
			if tc.wantErr == nil {
				clocktest.WaitFor(t, "a queued caller", func() bool { return p.Queued() == 1 })
				select {
				case r := <-done:
					t.Fatalf("returned before the hold ended: %+v", r)
				default:
				}
				clk.Advance(3 * time.Second)
			}
			r := <-done
			if !errors.Is(r.err, tc.wantErr) || r.queued != tc.wantQueued {
				t.Fatalf("Wait = %v, queued %v; want %v, queued %v", r.err, r.queued, tc.wantErr, tc.wantQueued)
			}
			if tc.wantErr != nil && !r.until.Equal(now.Add(3*time.Second)) {
				t.Fatalf("refused with until %v, want now+3s", r.until)
			}
		})
	}
}

// TestPacerReleasesInArrivalOrder: waiters leave one after the other in the
// order they came, each woken by the one before it.
func TestPacerReleasesInArrivalOrder(t *testing.T) {
	clk := clocktest.NewClock(now)
	p := newPacer()
	p.HoldAt(now, clk, now.Add(time.Second), HoldRateLimit, nil)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	const n = 8
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := p.Wait(context.Background(), clk, time.Minute); err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}()
		clocktest.WaitFor(t, "the next waiter in line", func() bool { return p.Queued() == i+1 })
	}
	clk.Advance(time.Second)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("release order %v, want 0..%d", order, n-1)
		}
	}
	if p.Active() || p.Queued() != 0 {
		t.Fatal("pacer still active after every waiter left")
	}
}

// TestPacerExtensionRefusesWaitersItMakesLate and a caller that gives up leaves
// the line without blocking the others.
func TestPacerExtensionRefusesWaitersItMakesLate(t *testing.T) {
	clk := clocktest.NewClock(now)
	p := newPacer()
	p.HoldAt(now, clk, now.Add(time.Second), HoldRateLimit, nil)
	results := make([]chan error, 3)
	ctx, cancel := context.WithCancel(context.Background())
	for i, maxWait := range []time.Duration{2 * time.Second, time.Minute, time.Minute} {
		results[i] = make(chan error, 1)
		c := context.Background()
		if i == 1 {
			c = ctx
		}
		go func() { _, _, err := p.Wait(c, clk, maxWait); results[i] <- err }()
		clocktest.WaitFor(t, "the next waiter in line", func() bool { return p.Queued() == i+1 })
	}
	p.HoldAt(now, clk, now.Add(10*time.Second), HoldDeferral, nil)
	if err := <-results[0]; !errors.Is(err, ErrHeld) {
		t.Fatalf("waiter with 2s after an extension to 10s: %v, want ErrHeld", err)
	}
	cancel()
	if err := <-results[1]; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter that gave up: %v, want context.Canceled", err)
	}
	clk.Advance(10 * time.Second)
	if err := <-results[2]; err != nil {
		t.Fatalf("last waiter: %v, want to go after the hold", err)
	}
}

func TestPacerWaitWithoutHoldDoesNotAllocate(t *testing.T) {
	clk := clocktest.NewClock(now)
	p := newPacer()
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { p.Wait(ctx, clk, time.Second) }); n != 0 {
		t.Fatalf("Wait with no hold allocates %v times, want 0", n)
	}
}
