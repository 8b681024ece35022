package redisstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/quotatest"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

func newStore(t testing.TB, addr, user, password string) *Store {
	s := New(Options{Address: addr, Username: user, Password: password, KeyPrefix: v1alpha1.QuotaKeys})
	t.Cleanup(func() { s.Close() })
	return s
}

// do runs an admin command on srv.
func do(t testing.TB, srv *redistest.Server, args ...any) {
	t.Helper()
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

func leaseOnce(t testing.TB, s *Store, spec quota.Spec, r quota.LeaseRequest) (quota.LeaseReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.Lease(ctx, spec, r)
}

var spec = quota.Spec{Name: "partner", RequestsPerSecond: 10, Burst: 5, Concurrency: 3, OnStoreLoss: quota.StoreLossLastShare}

// The script passes the lease table the Model passes too (package quota),
// on the table's clock: each case on keys of its own.
func TestScriptFollowsTheLeaseTable(t *testing.T) {
	srv := redistest.Start(t)
	quotatest.Run(t, func(t *testing.T, clk *clocktest.Clock) quota.Store {
		s := New(Options{Address: srv.Addr, KeyPrefix: func(name string) string { return "test:{" + t.Name() + "}:" + name + ":" }})
		t.Cleanup(func() { s.Close() })
		s.now = clk.Now
		return s
	})
}

func TestScriptsAreLoadedAgain(t *testing.T) {
	tests := map[string]func(t *testing.T, srv *redistest.Server){
		"after SCRIPT FLUSH": func(t *testing.T, srv *redistest.Server) { do(t, srv, "script", "flush") },
		"after a restart":    func(_ *testing.T, srv *redistest.Server) { srv.Stop(); srv.Restart() },
	}
	for name, fault := range tests {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, srv.Addr, "", "")
			if _, err := leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "a", Want: 1}); err != nil {
				t.Fatal(err)
			}
			fault(t, srv)
			var err error
			for range 3 { // a restart breaks the pooled connection once
				if _, err = leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "a", Want: 1}); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("lease %s: %v", name, err)
			}
		})
	}
}

func TestRefusedCredentials(t *testing.T) {
	srv := redistest.Start(t, redistest.WithPassword("admin-secret"))
	do(t, srv, "acl", "setuser", "elsewhere", "on", ">pw", "~retry:quota:{other}:*", "+@all")
	// A user of the quota's keys (--quota-credentials-file of a policy file).
	do(t, srv, "acl", "setuser", "partner-user", "on", ">pw", "~"+v1alpha1.QuotaKeys("partner")+"*", "+@all")
	tests := map[string]struct {
		user, password string
		refused        bool
	}{
		"a wrong password":                     {user: "partner-user", password: "wrong", refused: true},
		"an ACL user without the quota's keys": {user: "elsewhere", password: "pw", refused: true},
		"a user of the quota's keys":           {user: "partner-user", password: "pw"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, srv.Addr, tc.user, tc.password)
			_, err := leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "a", Want: 1})
			if got := errors.Is(err, quota.ErrRefused); got != tc.refused {
				t.Fatalf("lease error %v: refused %v, want %v", err, got, tc.refused)
			}
		})
	}
}

func TestPodsListsThePodsRecordedAndForgetDropsANamespaces(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Addr, "", "")
	pods := func() []string {
		t.Helper()
		got, err := s.Pods(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := pods(); len(got) != 0 {
		t.Errorf("pods of a quota never leased = %v, want none", got)
	}
	for _, r := range []quota.LeaseRequest{{Pod: "y/b", Namespace: "y"}, {Pod: "x/a", Namespace: "x"}, {Pod: "x/c", Namespace: "x"}} {
		if _, err := leaseOnce(t, s, spec, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pods(), []string{"x/a", "x/c", "y/b"}; !slices.Equal(got, want) {
		t.Errorf("pods = %v, want %v", got, want)
	}
	if err := s.Forget(t.Context(), spec, "x"); err != nil {
		t.Fatal(err)
	}
	if got, want := pods(), []string{"y/b"}; !slices.Equal(got, want) {
		t.Errorf("pods once x is forgotten = %v, want %v", got, want)
	}
}

func TestKilledPodsSlotsComeBackWithinTheLease(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Addr, "", "")
	if r, err := leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "killed", Want: 1, Slots: 3, InUse: 3}); err != nil || r.Slots != 3 {
		t.Fatalf("lease = %+v, %v; want 3 slots", r, err)
	}
	start := time.Now()
	for {
		r, err := leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "alive", Want: 1, Slots: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.Slots == 3 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the killed pod's slots did not come back within 10 s")
		}
		time.Sleep(250 * time.Millisecond) // the server's clock must move: nothing to await
	}
	if took := time.Since(start); took < quota.LeaseTTL-time.Second {
		t.Errorf("slots came back after %s, want about the lease time %s", took, quota.LeaseTTL)
	}
}

// skewed is a clock off by a fixed amount.
type skewed struct {
	clock.Real
	off time.Duration
}

func (s skewed) Now() time.Time { return time.Now().Add(s.off) }

// TestFleetAdmitsTheRateWhateverThePodClocks: three pods whose clocks are
// an hour behind, right and 90 minutes ahead draw on one quota; the store
// runs on its own clock and each pod puts its send times on its own, so
// together they start at most rate × t + burst attempts, and about the rate
// for the time the test's process ran, each pod a part of it.
//
// The arrivals are open-loop, every 5 ms, and none is dropped: a pod
// descheduled for a while sends the ones it missed when it runs again, as
// an app's queued requests would, and they take the send times still good.
// A ticker dropped them, so a pod stalled as the window closed left the
// send times it held unused. A stall of the whole process (a loaded
// machine) still costs the rate beyond the send times granted ahead (no
// lease is made meanwhile, and the store keeps no credit for a fleet that
// used less than the rate): the time it lasted is left out of the bound.
func TestFleetAdmitsTheRateWhateverThePodClocks(t *testing.T) {
	srv := redistest.Start(t)
	sp := quota.Spec{Name: "skew", RequestsPerSecond: 200, Burst: 40, OnStoreLoss: quota.StoreLossDeny}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var clients []*quota.Client
	var clocks []skewed
	for i, off := range []time.Duration{-time.Hour, 0, 90 * time.Minute} {
		clk := skewed{off: off}
		c := quota.New(sp, newStore(t, srv.Addr, "", ""), clk, quota.Pod{Name: "pod-" + string(rune('a'+i))}, log, quota.Observer{})
		if err := c.Start(); err != nil {
			// The first lease loads the script: on a loaded machine it can
			// take longer than StoreTimeout. The next comes an interval on;
			// 5 s allows the machine that.
			waitState(t, c, quota.StateReachable, 5*time.Second)
		}
		t.Cleanup(c.Close)
		clients, clocks = append(clients, c), append(clocks, clk)
	}
	// Each pod offers 200/s (3 × the rate in all) for 2 s, asking on its own
	// clock, as its admission does; the attempts that start are counted.
	const d, every = 2 * time.Second, 5 * time.Millisecond
	var wg sync.WaitGroup
	admitted := make([]int, len(clients))
	start := time.Now()
	pauses := watchPauses()
	for i, c := range clients {
		wg.Go(func() {
			for at := start; at.Sub(start) < d; at = at.Add(every) {
				time.Sleep(time.Until(at)) // none for the arrivals it is late for
				if _, v := c.TakeAt(clocks[i].Now(), 0, 0); v == limits.QuotaGranted {
					admitted[i]++
				}
			}
		})
	}
	wg.Wait()
	elapsed, paused := time.Since(start), pauses()
	total := admitted[0] + admitted[1] + admitted[2]
	// The attempts start between start and now. A pod's first lease knows
	// no demand yet: the fleet draws from its second, an interval on; and
	// while the process is stopped longer than an interval, none is made.
	most := int(sp.RequestsPerSecond*elapsed.Seconds()) + sp.Burst
	least := int(0.9 * sp.RequestsPerSecond * max(d-quota.Interval-paused, 0).Seconds())
	if total > most || total < least {
		t.Errorf("admitted %d in %s, want at most rate × t + burst = %d and at least 90 %% of the rate after the first interval, less the process's stops (%s), %d",
			total, elapsed, most, paused, least)
	}
	for i, n := range admitted {
		// A pod that misread its clock admits next to none. The division
		// between the pods is not exact: after a stop the one that leases
		// first takes what the others are owed for a while.
		if third := least / 3; n < third/4 {
			t.Errorf("pod %d (clock off by %s) admitted %d, want at least a quarter of its third, %d", i, clocks[i].off, n, third/4)
		}
	}
	t.Logf("admitted %v in %s, stopped %s (at most %d, at least %d)", admitted, elapsed.Round(time.Millisecond), paused, most, least)
}

// watchPauses measures how long this process could not run (a loaded
// machine stops it for hundreds of milliseconds at times) until the
// returned function is called, which reports it: of each gap between two
// wake-ups of a 1 ms sleep, what exceeds quota.Interval (the send times a
// pod holds cover that much).
func watchPauses() func() time.Duration {
	var stop atomic.Bool
	sum := make(chan time.Duration)
	go func() {
		var paused time.Duration
		for last := time.Now(); !stop.Load(); {
			time.Sleep(time.Millisecond)
			now := time.Now()
			paused += max(now.Sub(last)-quota.Interval, 0)
			last = now
		}
		sum <- paused
	}()
	return func() time.Duration {
		stop.Store(true)
		return <-sum
	}
}

// waitState polls c until it reports s (the client's own loop moves it).
func waitState(t *testing.T, c *quota.Client, s quota.State, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for c.Stats().State != s {
		if time.Since(start) > within {
			t.Fatalf("state %s after %s, want %s", c.Stats().State, within, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func TestStoreStoppedAndBack(t *testing.T) {
	tests := map[string]struct {
		mode quota.StoreLoss
		// while the store is down, after the tokens on hand expired
		want limits.QuotaVerdict
	}{
		"LastShare admits this pod's share": {mode: quota.StoreLossLastShare, want: limits.QuotaGranted},
		"EvenShare admits the rate ÷ pods":  {mode: quota.StoreLossEvenShare, want: limits.QuotaGranted},
		"Deny answers every attempt":        {mode: quota.StoreLossDeny, want: limits.QuotaDenied},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			sp := quota.Spec{Name: "loss", RequestsPerSecond: 100, Burst: 1, OnStoreLoss: tc.mode}
			c := quota.New(sp, newStore(t, srv.Addr, "", ""), clock.Real{}, quota.Pod{Name: "pod"}, slog.New(slog.NewTextHandler(io.Discard, nil)), quota.Observer{})
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			waitState(t, c, quota.StateReachable, time.Second)
			for now := time.Now(); ; now = time.Now() { // spend what is on hand
				if _, v := c.TakeAt(now, 0, 0); v != limits.QuotaGranted {
					break
				}
			}
			srv.Stop()
			waitState(t, c, quota.StateUnreachable, time.Second)
			time.Sleep(20 * time.Millisecond) // the fallback limiter refills one token
			start := time.Now()
			_, v := c.TakeAt(start, 0, 0)
			if took := time.Since(start); took > 5*time.Millisecond {
				t.Errorf("TakeAt with the store down took %s, want <= 5 ms", took)
			}
			if v != tc.want {
				t.Errorf("verdict with the store down = %d, want %d", v, tc.want)
			}
			srv.Restart()
			if took := waitState(t, c, quota.StateReachable, 2*time.Second); took > time.Second {
				t.Errorf("back in step %s after the store returned, want <= 1 s", took)
			}
		})
	}
}

// A lease to a store that is gone fails at once (connection refused), not
// after StoreTimeout: go-redis's own dial retries held every lease for the
// whole 250 ms, and attempts waiting for the lease an interval more before
// onStoreLoss took over.
func TestALeaseToAStoppedStoreFailsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Addr, "", "")
	sp := quota.Spec{Name: "gone", RequestsPerSecond: 100, Burst: 10}
	if _, err := leaseOnce(t, s, sp, quota.LeaseRequest{Pod: "p", Want: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := range 3 {
		start := time.Now()
		_, err := leaseOnce(t, s, sp, quota.LeaseRequest{Pod: "p", Want: 1})
		if took := time.Since(start); err == nil || took > quota.StoreTimeout/2 {
			t.Errorf("lease %d with the store stopped: %v after %s, want an error within %s", i, err, took, quota.StoreTimeout/2)
		}
	}
}
