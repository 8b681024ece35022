package redisstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quotastore"
	"github.com/retrydev/retry-operator/internal/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
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

func TestLeaseFollowsTheScript(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Addr, "", "")
	r, err := leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "a", Want: 100, Demand: 4, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Granted != 5 || r.Slots != 2 || r.Pods != 1 || r.FleetDemand != 4 {
		t.Errorf("first lease of a new quota = %+v, want the burst (5 tokens), 2 slots, 1 pod, demand 4", r)
	}
	r, err = leaseOnce(t, s, spec, quota.LeaseRequest{Pod: "b", Want: 100, Demand: 6, Slots: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Pod a holds 5 tokens = the burst: nothing is left for b until a spends
	// them; a holds 2 of the 3 slots.
	if r.Granted != 0 || r.Slots != 1 || r.Pods != 2 || r.FleetDemand != 10 {
		t.Errorf("second pod's lease = %+v, want 0 tokens (a holds the burst), 1 slot, 2 pods, demand 10", r)
	}
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
	// The user the manager creates for a namespace that may use the quota.
	do(t, srv, append([]any{"acl", "setuser", "partner-user"}, quotastore.UserRules("pw", []string{"partner"})...)...)
	tests := map[string]struct {
		user, password string
		refused        bool
	}{
		"a wrong password":                             {user: "partner-user", password: "wrong", refused: true},
		"an ACL user without the quota's keys":         {user: "elsewhere", password: "pw", refused: true},
		"the namespace's user as the manager makes it": {user: "partner-user", password: "pw"},
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

func TestFleetAdmitsTheRateWhateverThePodClocks(t *testing.T) {
	srv := redistest.Start(t)
	sp := quota.Spec{Name: "skew", RequestsPerSecond: 200, Burst: 40, OnStoreLoss: quota.StoreLossDeny}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var clients []*quota.Client
	for i, off := range []time.Duration{-time.Hour, 0, 90 * time.Minute} {
		c := quota.New(sp, newStore(t, srv.Addr, "", ""), skewed{off: off}, "pod-"+string(rune('a'+i)), log, quota.Observer{})
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clients = append(clients, c)
	}
	// Each pod offers 200/s (3 × the rate in all) for 2 s; arrivals counted.
	const d = 2 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	start := time.Now()
	for _, c := range clients {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			n := 0
			for now := range tick.C {
				if now.Sub(start) >= d {
					break
				}
				if _, v := c.TakeAt(now, 0); v == admission.QuotaGranted {
					n++
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	most := int(sp.RequestsPerSecond*elapsed.Seconds()) + sp.Burst
	if admitted > most || admitted < most*80/100 {
		t.Errorf("admitted %d in %s, want at most rate × t + burst = %d and at least 80 %% of it", admitted, elapsed, most)
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
		want admission.QuotaVerdict
	}{
		"LastShare admits this pod's share": {mode: quota.StoreLossLastShare, want: admission.QuotaGranted},
		"EvenShare admits the rate ÷ pods":  {mode: quota.StoreLossEvenShare, want: admission.QuotaGranted},
		"Deny answers every attempt":        {mode: quota.StoreLossDeny, want: admission.QuotaDenied},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			sp := quota.Spec{Name: "loss", RequestsPerSecond: 100, Burst: 1, OnStoreLoss: tc.mode}
			c := quota.New(sp, newStore(t, srv.Addr, "", ""), clock.Real{}, "pod", slog.New(slog.NewTextHandler(io.Discard, nil)), quota.Observer{})
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			waitState(t, c, quota.StateReachable, time.Second)
			for now := time.Now(); ; now = time.Now() { // spend what is on hand
				if _, v := c.TakeAt(now, 0); v != admission.QuotaGranted {
					break
				}
			}
			srv.Stop()
			waitState(t, c, quota.StateUnreachable, time.Second)
			time.Sleep(20 * time.Millisecond) // the fallback limiter refills one token
			start := time.Now()
			_, v := c.TakeAt(start, 0)
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

// While the fleet's demand is above the rate, a pod gets no more than its
// own credit (quota.Entitlement) plus a token, or what the others' credits
// leave: a quiet pod leasing often does not take the tokens a busy pod that
// leases late is owed. The busy pod's record is written as the script
// writes it, its credit at the most it can be (one second of its share).
func TestShortFleetLeavesTheBusyPodsCredit(t *testing.T) {
	sp := quota.Spec{Name: "credit", RequestsPerSecond: 10, Burst: 20, OnStoreLoss: quota.StoreLossLastShare}
	tests := map[string]struct {
		busyDemand float64
		granted    int64
	}{
		// busy 19.98/s of 20/s: owed 9.99 of the 20 tokens in the bucket.
		"a quiet pod of a short fleet gets what the busy pod is not owed": {19.98, 10},
		"a pod of a fleet that fits the rate gets what it asks for":       {5, 20},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, srv.Addr, "", "")
			now, err := srv.Client().Time(context.Background()).Result()
			if err != nil {
				t.Fatal(err)
			}
			do(t, srv, "hset", v1alpha1.QuotaKeys(sp.Name)+"pods", "busy",
				fmt.Sprintf("0 %.3f 0 %d", tc.busyDemand, now.UnixMilli()))
			do(t, srv, "hset", v1alpha1.QuotaKeys(sp.Name)+"credits", "busy", "50.0000")
			var r quota.LeaseReply
			for _, want := range []int64{0, 20} {
				if r, err = leaseOnce(t, s, sp, quota.LeaseRequest{Pod: "quiet", Demand: 0.02, Want: want}); err != nil {
					t.Fatal(err)
				}
			}
			if r.Granted != tc.granted || r.Pods != 2 {
				t.Errorf("the quiet pod's second lease = %+v, want %d tokens of 2 pods", r, tc.granted)
			}
		})
	}
}
