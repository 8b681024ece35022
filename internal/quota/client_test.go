package quota

import (
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"testing"
	"time"

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
