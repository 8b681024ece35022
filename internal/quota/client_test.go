package quota

import (
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

func newClients(t *testing.T, spec Spec, n int) (*clocktest.Clock, *Model, []*Client) {
	clk := clocktest.NewClock(t0)
	m := NewModel(clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cs []*Client
	for i := range n {
		c := New(spec, m, clk, string(rune('a'+i)), log, Observer{})
		_ = c.Start()
		t.Cleanup(c.Close)
		cs = append(cs, c)
	}
	return clk, m, cs
}

// A hold one pod saw reaches every pod of the fleet with its next lease
// (within IdleInterval for a pod without demand).
func TestHoldReachesTheFleet(t *testing.T) {
	clk, _, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 10, Burst: 5}, 2)
	until := t0.Add(30 * time.Second)
	cs[0].Hold(until)
	if got := cs[1].HoldUntil(clk.Now()); !got.IsZero() {
		t.Fatalf("the other pod holds until %s before any lease, want no hold yet", got)
	}
	clk.Advance(IdleInterval + Interval)
	for i, c := range cs {
		if got := c.HoldUntil(clk.Now()); !got.Equal(until.Truncate(time.Millisecond)) && !got.Equal(until) {
			t.Errorf("pod %d holds until %s, want %s", i, got, until)
		}
	}
	clk.AdvanceTo(until)
	if got := cs[1].HoldUntil(clk.Now()); !got.IsZero() {
		t.Errorf("the hold is still in force at its end: %s", got)
	}
}

// A pod killed holding slots gives them back within the lease time.
func TestKilledPodsSlotsComeBack(t *testing.T) {
	clk, _, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 10, Burst: 5, Concurrency: 1}, 2)
	killed, alive := cs[0], cs[1] // the first to lease got the only slot
	if !killed.Slots().TryAcquire() {
		t.Fatal("the first pod has no slot")
	}
	clk.Advance(2 * Interval)
	if alive.Slots().TryAcquire() {
		t.Fatal("the other pod got a slot while the first holds the only one")
	}
	killed.Close()
	start := clk.Now()
	for !alive.Slots().TryAcquire() {
		clk.Advance(Interval)
		if clk.Now().Sub(start) > 10*time.Second {
			t.Fatal("the killed pod's slot did not come back within 10 s")
		}
	}
	if took := clk.Now().Sub(start); took > LeaseTTL+IdleInterval {
		t.Errorf("the slot came back after %s, want within the lease time %s (+ one idle lease interval)", took, LeaseTTL)
	}
}

// While the store is down a Deny quota answers at once, and a pod that
// never reached the store admits nothing whatever onStoreLoss says.
func TestStoreDownAtStartAdmitsNothing(t *testing.T) {
	clk := clocktest.NewClock(t0)
	m := NewModel(clk)
	m.SetDown(true)
	c := New(Spec{Name: "q", RequestsPerSecond: 100, Burst: 10, OnStoreLoss: StoreLossEvenShare}, m, clk, "p",
		slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
	if err := c.Start(); err == nil {
		t.Fatal("Start with the store down returned no error")
	}
	defer c.Close()
	if _, v := c.TakeAt(clk.Now(), 0); v != admission.QuotaDenied {
		t.Errorf("verdict %d, want QuotaDenied (no share known)", v)
	}
	if c.Stats().State != StateUnreachable {
		t.Errorf("state %s, want unreachable", c.Stats().State)
	}
	m.SetDown(false)
	clk.Advance(Interval)
	if c.Stats().State != StateReachable {
		t.Errorf("state %s after the store came back, want reachable", c.Stats().State)
	}
}

// stuckClock runs the client's timers an hour late: its steps never come
// within a test.
type stuckClock struct{ *clocktest.Clock }

func (c stuckClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Clock.AfterFunc(d+time.Hour, f)
}

// Attempts waiting for a step that is overdue (a loaded machine runs timers
// late) ask again after as long as the step is late, a quarter interval at
// least and an interval at most, not every millisecond: hundreds of waiters
// polling would take the CPU the late step needs.
func TestWaitersOfAnOverdueStepAskAgainAsLateAsTheStep(t *testing.T) {
	clk := clocktest.NewClock(t0)
	c := New(Spec{Name: "q", RequestsPerSecond: 10, Burst: 1}, NewModel(clk), stuckClock{clk}, "a",
		slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
	_ = c.Start()
	t.Cleanup(c.Close)
	for c.Stats().Tokens > 0 {
		c.TakeAt(clk.Now(), 0)
	}
	tests := []struct {
		name  string
		after time.Duration
		want  time.Duration
	}{
		{"before the next step, until the step", 40 * time.Millisecond, Interval - 40*time.Millisecond},
		{"a step 10 ms late, a quarter interval", Interval + 10*time.Millisecond, Interval / 4},
		{"a step 60 ms late, 60 ms", Interval + 60*time.Millisecond, 60 * time.Millisecond},
		{"a step 500 ms late, an interval", Interval + 500*time.Millisecond, Interval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk.AdvanceTo(t0.Add(tc.after))
			wait, v := c.TakeAt(clk.Now(), 0)
			if v != admission.QuotaWait || wait != tc.want {
				t.Errorf("TakeAt = %s, %v; want %s, wait", wait, v, tc.want)
			}
		})
	}
}

// A pod with an attempt every 1.234 s (longer than IdleInterval, between two
// steps) on a quota far above the fleet's demand finds a token on hand for
// each: with none on hand it leases one (Want), even for less than a token
// of demand per interval.
func TestASlowPodOfARoomyQuotaFindsATokenOnHand(t *testing.T) {
	clk, _, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 1000, Burst: 100}, 1)
	waited := 0
	for range 20 {
		clk.Advance(1234 * time.Millisecond)
		start := clk.Now()
		wait, v := cs[0].TakeAt(start, 0)
		if v != admission.QuotaGranted {
			waited++
		}
		for v == admission.QuotaWait && clk.Now().Sub(start) < time.Second {
			clk.Advance(wait)
			wait, v = cs[0].TakeAt(clk.Now(), clk.Now().Sub(start))
		}
		if v != admission.QuotaGranted {
			t.Fatalf("no token within 1 s: verdict %d", v)
		}
	}
	if waited > 1 {
		t.Errorf("%d of 20 attempts found no token on hand, want at most the first", waited)
	}

}

// An attempt whose lease is kicked at the instant of an idle step (the same
// time on a virtual clock) counts in the demand reported to the store: it
// used to be dropped with a step interval of 0.
func TestAnAttemptKickedAtAnIdleStepCountsInTheDemand(t *testing.T) {
	clk, m, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 1000, Burst: 100}, 1)
	clk.Advance(2*IdleInterval + 5*Interval) // an idle step now; the store last at 2 s
	for cs[0].Stats().Tokens > 0 {
		cs[0].TakeAt(clk.Now(), 0)
	}
	if _, v := cs[0].TakeAt(clk.Now(), 0); v != admission.QuotaWait {
		t.Fatalf("verdict %d with no token on hand, want QuotaWait", v)
	}
	clk.Advance(0) // the kicked lease
	m.mu.Lock()
	demand := m.pods["a"].demand
	m.mu.Unlock()
	if demand <= 0 {
		t.Errorf("demand reported %g after an attempt, want more than 0", demand)
	}
}

// A pod that loses the store admits the share of the demand it last
// reported, the one the store summed into the fleet's: not its demand at
// the failed lease, which counts its waiting attempts again (each weighs
// more the longer it waits), so the shares of a lost store would add up to
// more than the rate.
func TestALostStoresShareIsTheDemandLastReported(t *testing.T) {
	spec := Spec{Name: "q", RequestsPerSecond: 100, Burst: 10, OnStoreLoss: StoreLossLastShare}
	clk, m, cs := newClients(t, spec, 2)
	for range 200 { // 50/s each for 2 s: a share of 0.5 each
		clk.Advance(10 * time.Millisecond)
		cs[int(clk.Now().Sub(t0)/(10*time.Millisecond))%2].TakeAt(clk.Now(), 0)
	}
	m.SetDown(true)
	cs[0].TakeAt(clk.Now(), 2*Interval)                       // two attempts that waited two intervals
	cs[0].TakeAt(clk.Now(), 2*Interval)                       // weigh 5 each in the demand
	clk.Advance(Interval)                                     // the failed lease
	for now := clk.Now(); ; now = now.Add(time.Millisecond) { // what is on hand
		clk.AdvanceTo(now)
		if _, v := cs[0].TakeAt(now, 0); v != admission.QuotaGranted {
			break
		}
	}
	admitted := 0
	for from := clk.Now(); clk.Now().Sub(from) < 2*time.Second; clk.Advance(time.Millisecond) {
		if _, v := cs[0].TakeAt(clk.Now(), 0); v == admission.QuotaGranted {
			admitted++
		}
	}
	if admitted > 110 {
		t.Errorf("admitted %d in 2 s with the store lost, want about 100 (its share 0.5 of 100/s)", admitted)
	}
}
