package limits

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// TestBudgetSteps is a step table (R6): retryPercent 20 and no floor, so 10 first
// attempts buy exactly 2 retries, and the window forgets them after 10 s.
func TestBudgetSteps(t *testing.T) {
	type step struct {
		at     time.Duration
		firsts int  // first attempts recorded before the retry
		want   bool // the TryRetryAt result
	}
	tests := map[string]struct {
		cfg   BudgetConfig
		steps []step
	}{
		"20 percent of 10 first attempts is 2 retries": {
			cfg:   BudgetConfig{RetryPercent: 20},
			steps: []step{{0, 10, true}, {0, 0, true}, {0, 0, false}, {time.Second, 0, false}},
		},
		"retries without first attempts are refused": {
			cfg:   BudgetConfig{RetryPercent: 100},
			steps: []step{{0, 0, false}},
		},
		"the window forgets first attempts after 10 s": {
			cfg:   BudgetConfig{RetryPercent: 20},
			steps: []step{{0, 10, true}, {9500 * time.Millisecond, 0, true}, {10 * time.Second, 0, false}},
		},
		"spent retries are forgotten with their window": {
			cfg:   BudgetConfig{RetryPercent: 20},
			steps: []step{{0, 5, true}, {0, 0, false}, {5 * time.Second, 5, true}, {5 * time.Second, 0, false}, {10 * time.Second, 0, false}, {15 * time.Second, 5, true}},
		},
		"the floor allows minRetriesPerSecond times 10 retries per window": {
			cfg:   BudgetConfig{RetryPercent: 0, MinRetriesPerSecond: 1},
			steps: []step{{0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, true}, {0, 0, false}},
		},
		"time going backwards counts into the newest bucket": {
			cfg:   BudgetConfig{RetryPercent: 10},
			steps: []step{{5 * time.Second, 10, true}, {time.Second, 0, false}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := newBudget(tc.cfg)
			for i, s := range tc.steps {
				for range s.firsts {
					b.RecordFirstAt(now.Add(s.at))
				}
				if got := b.TryRetryAt(now.Add(s.at)); got != s.want {
					f, r := b.CountsAt(now.Add(s.at))
					t.Fatalf("step %d at +%v: TryRetryAt = %v, want %v (window: %d firsts, %d retries)", i, s.at, got, s.want, f, r)
				}
			}
		})
	}
}

func TestBudgetNilAllowsEverything(t *testing.T) {
	var b *Budget
	b.RecordFirstAt(now)
	if !b.TryRetryAt(now) {
		t.Fatal("a nil budget refused a retry")
	}
}

// TestBudgetConcurrentUse: under contention the budget never grants more than it may.
func TestBudgetConcurrentUse(t *testing.T) {
	b := newBudget(BudgetConfig{RetryPercent: 20})
	for range 1000 {
		b.RecordFirstAt(now)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if b.TryRetryAt(now) {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if granted != 200 {
		t.Fatalf("granted %d retries, want exactly 200 (20%% of 1000)", granted)
	}
}

// TestGateQueue covers R7's in-flight bound and its bounded FIFO queue.
func TestGateQueue(t *testing.T) {
	clk := clocktest.NewClock(now)
	g := NewGate(ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 1, QueueTimeout: time.Second})
	ctx := context.Background()
	if _, err := g.Acquire(ctx, clk, time.Minute); err != nil {
		t.Fatalf("first Acquire: %v", err)
	}
	got := make(chan error, 1)
	go func() { _, err := g.Acquire(ctx, clk, time.Minute); got <- err }()
	clocktest.WaitFor(t, "a queued waiter", func() bool { return g.Queued() == 1 })

	ra, err := g.Acquire(ctx, clk, time.Minute)
	if !errors.Is(err, ErrShed) || ra != 2*time.Second {
		t.Fatalf("Acquire with a full queue = %v, %v; want ErrShed at once, capacity back in 2s (1 in flight + 1 queued, 1s each by default)", ra, err)
	}
	g.Release(3 * time.Second) // the slot goes straight to the waiter
	if err := <-got; err != nil {
		t.Fatalf("queued Acquire: %v", err)
	}
	if g.InFlight() != 1 || g.Queued() != 0 {
		t.Fatalf("after hand-over: %d in flight, %d queued; want 1, 0", g.InFlight(), g.Queued())
	}

	go func() { _, err := g.Acquire(ctx, clk, time.Minute); got <- err }()
	clocktest.WaitFor(t, "a timer for the queue timeout", clk.TimerSet)
	clk.Advance(time.Second)
	if err := <-got; !errors.Is(err, ErrShed) {
		t.Fatalf("Acquire past the queue timeout = %v, want ErrShed", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := g.Acquire(cctx, clk, time.Minute); got <- err }()
	clocktest.WaitFor(t, "a queued waiter", func() bool { return g.Queued() == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire of a canceled caller = %v, want context.Canceled", err)
	}
	if g.Queued() != 0 || g.InFlight() != 1 {
		t.Fatalf("a caller that left still counts: %d queued, %d in flight", g.Queued(), g.InFlight())
	}

	if _, err := g.Acquire(ctx, clk, 0); !errors.Is(err, ErrShed) {
		t.Fatalf("Acquire that cannot wait at all = %v, want ErrShed", err)
	}
	g.Release(time.Second)
	if g.InFlight() != 0 {
		t.Fatalf("in flight after the last release = %d, want 0", g.InFlight())
	}
}

// TestAdmitRateLimit: starts are spaced by the limiter; a wait that does not fit
// is shed at once with the exact time the next token comes (R7).
func TestAdmitRateLimit(t *testing.T) {
	clk := clocktest.NewClock(now)
	l := New(Config{RateLimit: &RateLimitConfig{RequestsPerSecond: 0.5, Burst: 1}})
	var slept []time.Duration
	sleep := func(_ context.Context, d time.Duration) error { slept = append(slept, d); clk.Advance(d); return nil }
	ctx := context.Background()
	if _, _, err := l.Admit(ctx, clk, sleep, time.Minute); err != nil || len(slept) != 0 {
		t.Fatalf("first start: %v, slept %v; want immediate", err, slept)
	}
	if _, _, err := l.Admit(ctx, clk, sleep, time.Minute); err != nil || len(slept) != 1 || slept[0] != 2*time.Second {
		t.Fatalf("second start: %v, slept %v; want to wait 2s for the token", err, slept)
	}
	_, ra, err := l.Admit(ctx, clk, sleep, time.Second)
	if !errors.Is(err, ErrShed) || ra != 2*time.Second || len(slept) != 1 {
		t.Fatalf("third start with 1s to spare = %v, %v (slept %v); want ErrShed, capacity in 2s, no wait", ra, err, slept)
	}
	// The shed caller gave its reservation back: the next token is still 2s away.
	if _, _, err := l.Admit(ctx, clk, sleep, time.Minute); err != nil || slept[1] != 2*time.Second {
		t.Fatalf("after a shed: %v, slept %v; want a 2s wait", err, slept)
	}
}

// TestGateShedsAtOnceWhenTheQueueWaitWouldPassTheDeadline: a caller that cannot
// afford the expected queue wait is shed immediately, not queued until its
// deadline (R7).
func TestGateShedsAtOnceWhenTheQueueWaitWouldPassTheDeadline(t *testing.T) {
	clk := clocktest.NewClock(now)
	ctx := context.Background()
	tests := map[string]struct {
		history time.Duration // hold time of one finished attempt (0: none yet)
		maxWait time.Duration
		shed    bool
	}{
		"no history: a caller with less time than the queue timeout is shed": {0, 300 * time.Millisecond, true},
		"no history: a caller that can afford the queue timeout queues":      {0, 5 * time.Second, false},
		"attempts hold 2s: a caller with 300ms left is shed":                 {2 * time.Second, 300 * time.Millisecond, true},
		"attempts hold 10ms: a caller with 300ms left queues":                {10 * time.Millisecond, 300 * time.Millisecond, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewGate(ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 5, QueueTimeout: time.Second})
			if tc.history > 0 {
				g.Acquire(ctx, clk, time.Minute)
				g.Release(tc.history)
			}
			if _, err := g.Acquire(ctx, clk, time.Minute); err != nil {
				t.Fatalf("first Acquire: %v", err)
			}
			got := make(chan error, 1)
			go func() { _, err := g.Acquire(ctx, clk, tc.maxWait); got <- err }()
			if tc.shed {
				if err := <-got; !errors.Is(err, ErrShed) {
					t.Fatalf("Acquire = %v, want ErrShed at once", err)
				}
				if g.Queued() != 0 {
					t.Fatalf("a shed caller is queued")
				}
				return
			}
			clocktest.WaitFor(t, "a queued waiter", func() bool { return g.Queued() == 1 })
			g.Release(time.Millisecond)
			if err := <-got; err != nil {
				t.Fatalf("queued Acquire: %v", err)
			}
		})
	}
}

// TestLimitsOccupancy: InFlight counts every admitted attempt until it is
// released, limited upstream or not; Queued counts callers pacing for a start
// token and callers in the gate's queue (the sidecar's gauges).
func TestLimitsOccupancy(t *testing.T) {
	ctx := context.Background()

	t.Run("an upstream without limits counts its attempts in flight", func(t *testing.T) {
		l := New(Config{})
		a, _, _ := l.Admit(ctx, clocktest.NewClock(now), nil, time.Second)
		b, _, _ := l.Admit(ctx, clocktest.NewClock(now), nil, time.Second)
		if l.InFlight() != 2 || l.Queued() != 0 {
			t.Fatalf("two admitted: %d in flight, %d queued; want 2, 0", l.InFlight(), l.Queued())
		}
		a.Release(now)
		b.Release(now)
		Ticket{}.Release(now) // a refused attempt's zero ticket holds nothing
		if l.InFlight() != 0 {
			t.Fatalf("after release: %d in flight, want 0", l.InFlight())
		}
	})

	t.Run("a caller pacing for a start token is queued, then in flight", func(t *testing.T) {
		clk := clocktest.NewClock(now)
		l := New(Config{RateLimit: &RateLimitConfig{RequestsPerSecond: 1, Burst: 1}})
		var queuedWhileSleeping int
		sleep := func(_ context.Context, d time.Duration) error {
			queuedWhileSleeping = l.Queued()
			clk.Advance(d)
			return nil
		}
		first, _, _ := l.Admit(ctx, clk, sleep, time.Minute)
		second, _, err := l.Admit(ctx, clk, sleep, time.Minute)
		if err != nil || queuedWhileSleeping != 1 || l.Queued() != 0 || l.InFlight() != 2 {
			t.Fatalf("err %v; queued while sleeping %d, after %d, in flight %d; want nil, 1, 0, 2", err, queuedWhileSleeping, l.Queued(), l.InFlight())
		}
		first.Release(clk.Now())
		second.Release(clk.Now())
	})

	t.Run("a caller in the gate's queue is queued; a shed caller is neither", func(t *testing.T) {
		clk := clocktest.NewClock(now)
		l := New(Config{Concurrency: &ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 1, QueueTimeout: time.Second}})
		held, _, _ := l.Admit(ctx, clk, nil, time.Minute)
		done := make(chan Ticket)
		go func() { tk, _, _ := l.Admit(ctx, clk, nil, time.Minute); done <- tk }()
		clocktest.WaitFor(t, "a queued caller", func() bool { return l.Queued() == 1 })
		if _, _, err := l.Admit(ctx, clk, nil, time.Minute); !errors.Is(err, ErrShed) {
			t.Fatalf("third caller: %v, want ErrShed (queue full)", err)
		}
		if l.InFlight() != 1 || l.Queued() != 1 {
			t.Fatalf("one held, one queued, one shed: %d in flight, %d queued; want 1, 1", l.InFlight(), l.Queued())
		}
		held.Release(clk.Now())
		next := <-done
		if l.InFlight() != 1 || l.Queued() != 0 {
			t.Fatalf("after hand-over: %d in flight, %d queued; want 1, 0", l.InFlight(), l.Queued())
		}
		next.Release(clk.Now())
		if l.InFlight() != 0 {
			t.Fatalf("after the last release: %d in flight, want 0", l.InFlight())
		}
	})
}
