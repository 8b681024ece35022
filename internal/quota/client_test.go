package quota

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

func newClients(t *testing.T, spec Spec, n int) (*clocktest.Clock, *Model, []*Client) {
	clk := clocktest.NewClock(t0)
	m := NewModel(clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var cs []*Client
	for i := range n {
		c := New(spec, m, clk, Pod{Name: string(rune('a' + i))}, log, Observer{})
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
	killed, alive := cs[0], cs[1]
	killed.TakeAt(clk.Now(), 0, 0) // demand: its next lease asks for a slot
	clk.Advance(Interval)
	if !killed.Slots().TryAcquire() {
		t.Fatal("the first pod has no slot")
	}
	alive.TakeAt(clk.Now(), 0, 0)
	clk.Advance(2 * Interval)
	if alive.Slots().TryAcquire() {
		t.Fatal("the other pod got a slot while the first holds the only one")
	}
	killed.Close()
	start := clk.Now()
	for !alive.Slots().TryAcquire() {
		alive.TakeAt(clk.Now(), 0, 0) // it has demand all along
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
	c := New(Spec{Name: "q", RequestsPerSecond: 100, Burst: 10, OnStoreLoss: StoreLossEvenShare}, m, clk, Pod{Name: "p"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
	if err := c.Start(); err == nil {
		t.Fatal("Start with the store down returned no error")
	}
	defer c.Close()
	if _, v := c.TakeAt(clk.Now(), 0, time.Second); v != limits.QuotaDenied {
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
// polling would take the CPU the late step needs. Only the ask that kicks a
// lease (at most one an interval) waits just its round trip.
func TestWaitersOfAnOverdueStepAskAgainAsLateAsTheStep(t *testing.T) {
	clk := clocktest.NewClock(t0)
	c := New(Spec{Name: "q", RequestsPerSecond: 10, Burst: 1}, NewModel(clk), stuckClock{clk}, Pod{Name: "a"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
	_ = c.Start()
	t.Cleanup(c.Close)
	for c.Stats().Tokens > 0 {
		c.TakeAt(clk.Now(), 0, 0)
	}
	tests := []struct {
		name  string
		after time.Duration
		want  time.Duration
	}{
		{"before the next step, until the step", 40 * time.Millisecond, Interval - 40*time.Millisecond},
		{"a step 10 ms late: the first ask kicks a lease and waits a round trip for it", Interval + 10*time.Millisecond, time.Millisecond},
		{"a step 10 ms late, the kicked lease not come either: a quarter interval", Interval + 10*time.Millisecond, Interval / 4},
		{"a step 60 ms late, 60 ms", Interval + 60*time.Millisecond, 60 * time.Millisecond},
		{"a step 500 ms late, an interval", Interval + 500*time.Millisecond, Interval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk.AdvanceTo(t0.Add(tc.after))
			st, v := c.TakeAt(clk.Now(), 0, time.Second)
			if wait := st.At.Sub(clk.Now()); v != limits.QuotaWait || wait != tc.want {
				t.Errorf("TakeAt = %s, %v; want %s, wait", wait, v, tc.want)
			}
		})
	}
}

// A pod with an attempt every 1.234 s (longer than IdleInterval, between two
// steps) on a quota far above the fleet's demand, whose burst lets a send
// time stay good for 2 s, finds one on hand for each: with none on hand it
// leases one (Want), even for less than one of demand per interval, placed
// from now on (not due) so it stays good longest.
func TestASlowPodOfARoomyQuotaFindsASendTimeOnHand(t *testing.T) {
	clk, _, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 1000, Burst: 2000}, 1)
	waited := 0
	for range 20 {
		clk.Advance(1234 * time.Millisecond)
		start := clk.Now()
		st, v := cs[0].TakeAt(start, 0, time.Second)
		if v != limits.QuotaGranted || st.At.After(start) {
			waited++
		}
		for v == limits.QuotaWait && clk.Now().Sub(start) < time.Second {
			clk.AdvanceTo(st.At)
			st, v = cs[0].TakeAt(clk.Now(), clk.Now().Sub(start), time.Second-clk.Now().Sub(start))
		}
		if v != limits.QuotaGranted {
			t.Fatalf("no send time within 1 s: verdict %d", v)
		}
	}
	if waited > 1 {
		t.Errorf("%d of 20 attempts found no send time on hand, want at most the first", waited)
	}
}

// An attempt whose lease is kicked at the instant of an idle step (the same
// time on a virtual clock) counts in the demand reported to the store: it
// used to be dropped with a step interval of 0.
func TestAnAttemptKickedAtAnIdleStepCountsInTheDemand(t *testing.T) {
	clk, m, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 1000, Burst: 100}, 1)
	clk.Advance(2*IdleInterval + 5*Interval) // an idle step now; the store last at 2 s
	for cs[0].Stats().Tokens > 0 {
		cs[0].TakeAt(clk.Now(), 0, 0)
	}
	if _, v := cs[0].TakeAt(clk.Now(), 0, time.Second); v != limits.QuotaWait {
		t.Fatalf("verdict %d with no send time on hand, want QuotaWait", v)
	}
	clk.Advance(0) // the kicked lease
	m.mu.Lock()
	demand := m.pods["a"].demand
	m.mu.Unlock()
	if demand <= 0 {
		t.Errorf("demand reported %g after an attempt, want more than 0", demand)
	}
}

// A pod that loses the store admits its last share of the rate, as the
// store divided it (the shares of all pods add up to the rate), besides
// the send times it still holds.
func TestALostStoresShareIsTheLastShareOfTheRate(t *testing.T) {
	spec := Spec{Name: "q", RequestsPerSecond: 100, Burst: 10, OnStoreLoss: StoreLossLastShare}
	clk, m, cs := newClients(t, spec, 2)
	for range 200 { // 50/s each for 2 s: a share of 50/s each
		clk.Advance(10 * time.Millisecond)
		cs[int(clk.Now().Sub(t0)/(10*time.Millisecond))%2].TakeAt(clk.Now(), 0, 0)
	}
	m.SetDown(true)
	clk.Advance(Interval) // the failed lease
	held := cs[0].Stats().Tokens
	admitted := 0
	for from := clk.Now(); clk.Now().Sub(from) < 2*time.Second; clk.Advance(time.Millisecond) {
		if st, v := cs[0].TakeAt(clk.Now(), 0, 0); v == limits.QuotaGranted && !st.At.After(clk.Now()) {
			admitted++
		}
	}
	if most := int(held) + 100; admitted > most || admitted < 90 {
		t.Errorf("admitted %d in 2 s with the store lost, want about 100 (its share, 50/s) and at most %d (with the %d it held)",
			admitted, most, held)
	}
}

// revokingStore grants while allowed, then answers every lease with
// ErrRevoked, as the lease endpoint does once the pod's namespace has left
// the quota's consumers.
type revokingStore struct {
	*Model
	revoked bool
}

func (s *revokingStore) Lease(ctx context.Context, spec Spec, r LeaseRequest) (LeaseReply, error) {
	if s.revoked {
		return LeaseReply{}, fmt.Errorf("lease endpoint: %w: namespace shop is not a consumer", ErrRevoked)
	}
	return s.Model.Lease(ctx, spec, r)
}

// A revoked pod admits nothing from the first refused lease on, whatever
// onStoreLoss says (a lost store under LastShare would keep sending), drops
// the tokens and slots on hand, and draws again once a lease succeeds.
func TestARevokedPodAdmitsNothingWhateverOnStoreLoss(t *testing.T) {
	for _, loss := range []StoreLoss{StoreLossLastShare, StoreLossEvenShare, StoreLossDeny} {
		t.Run(string(loss), func(t *testing.T) {
			clk := clocktest.NewClock(t0)
			store := &revokingStore{Model: NewModel(clk)}
			c := New(Spec{Name: "q", RequestsPerSecond: 100, Burst: 10, Concurrency: 2, OnStoreLoss: loss}, store, clk, Pod{Name: "p"},
				slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.TakeAt(clk.Now(), 0, 0) // demand: the next lease grants
			clk.Advance(Interval)
			if _, v := c.TakeAt(clk.Now(), 0, 0); v != limits.QuotaGranted {
				t.Fatalf("verdict %d before the revocation, want QuotaGranted", v)
			}
			store.revoked = true
			clk.Advance(Interval)
			if got := c.Stats().State; got != StateRevoked {
				t.Fatalf("state %s after a revoked lease, want revoked", got)
			}
			if got := c.Stats().Tokens; got != 0 {
				t.Errorf("%d send times on hand after the revocation, want 0", got)
			}
			if c.Slots().TryAcquire() {
				t.Error("a slot was acquired after the revocation")
			}
			for i := range 5 {
				if _, v := c.TakeAt(clk.Now(), 0, 0); v != limits.QuotaDenied {
					t.Fatalf("attempt %d after the revocation: verdict %d, want QuotaDenied", i, v)
				}
				clk.Advance(Interval)
			}
			store.revoked = false
			clk.Advance(Interval)
			if got := c.Stats().State; got != StateReachable {
				t.Fatalf("state %s after a lease succeeded again, want reachable", got)
			}
			c.TakeAt(clk.Now(), 0, 0)
			clk.Advance(Interval)
			if _, v := c.TakeAt(clk.Now(), 0, 0); v != limits.QuotaGranted {
				t.Errorf("verdict %d after a lease succeeded again, want QuotaGranted", v)
			}
		})
	}
}

// One pod with attempts waiting while three others are idle can have every
// slot of the quota's concurrency in flight: the idle pods' slots are lent
// to it. The fleet never has more than the concurrency in flight.
func TestALonePodWithDemandUsesEverySlot(t *testing.T) {
	clk, _, cs := newClients(t, Spec{Name: "q", RequestsPerSecond: 1000, Burst: 100, Concurrency: 3}, 4)
	busy := cs[len(cs)-1] // the last to lease: the others leased before it
	inFlight := 0
	for range 10 {
		busy.TakeAt(clk.Now(), 0, 0)
		for busy.Slots().TryAcquire() {
			inFlight++
		}
		clk.Advance(Interval)
	}
	if inFlight != 3 {
		t.Errorf("the pod with demand has %d attempts in flight, want 3 (every slot)", inFlight)
	}
	for i, c := range cs[:len(cs)-1] {
		if c.Slots().TryAcquire() {
			t.Errorf("idle pod %d acquired a slot while the busy pod holds all 3", i)
		}
	}
}
