package manager

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Terms runs the leader's work in terms of office. Each time this replica
// wins the Lease it builds a fresh controller-runtime manager for the term
// (NewTerm: the reconcilers, the certificate rotator), runs it until the
// Lease is lost, waits for it to stop, and campaigns again — without leaving
// the process.
//
// controller-runtime's own leader election ends the process when the Lease
// is lost (an API server away for longer than RenewDeadline is enough), and
// the kubelet restarts it with a growing back-off: a leader that lost its
// Lease twice in a few minutes was away for tens of seconds, and after
// repeated API server restarts the first edit had not been rendered 150 s
// later (docs/operations.md#high-availability). A term ends instead; the
// webhooks, probes and metrics of the replica's long-lived manager never
// stop, and the replica is a candidate again at once.
type Terms struct {
	// Config reaches the API server; the Lease is renewed with a copy whose
	// timeout is RenewDeadline / 2, as client-go's resource lock does.
	Config *rest.Config
	// Namespace and Name of the Lease.
	Namespace, Name string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's; zero
	// values are 15 s, 10 s and 2 s (controller-runtime's defaults).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// NewTerm builds the manager of one term with its leader-only
	// runnables. It must not bind ports (metrics and probes: "0"): the
	// replica's own manager serves those.
	NewTerm func() (ctrl.Manager, error)
	// Ready, if set, returns once the API server is ready to serve (its
	// /readyz): a manager built afresh by Refresh waits for it, since an API
	// server accepts connections before its authorizer is ready and
	// answers 403 to every request until then, and each failed list would
	// cost the fresh informers a step of their backoff.
	Ready func(ctx context.Context) error
	// Alone skips the election: one term for the life of the replica (a
	// single replica run without --leader-elect).
	Alone bool
	Log   logr.Logger

	leading atomic.Bool
	terms   atomic.Int64
	current atomic.Pointer[ctrl.Manager] // the running term's, nil between terms

	mu      sync.Mutex
	stop    context.CancelFunc // ends the running term's manager; nil if none
	started time.Time          // when it started
	fresh   atomic.Int64       // managers built afresh by Refresh
}

// refreshMinInterval is the least time between two managers Refresh builds:
// the concurrent dials that find the API server back all call Refresh, and
// one fresh manager answers them all.
const refreshMinInterval = 2 * time.Second

// Current is the manager of the term running now, nil if none.
func (t *Terms) Current() ctrl.Manager {
	if m := t.current.Load(); m != nil {
		return *m
	}
	return nil
}

// NeedLeaderElection is false: Terms holds its own election.
func (t *Terms) NeedLeaderElection() bool { return false }

// Leading reports whether a term runs now.
func (t *Terms) Leading() bool { return t.leading.Load() }

// Count is the number of terms begun so far.
func (t *Terms) Count() int64 { return t.terms.Load() }

// Refreshed is the number of managers Refresh has had built afresh.
func (t *Terms) Refreshed() int64 { return t.fresh.Load() }

// Refresh ends the running term's manager, keeping the Lease, so that serve
// builds a fresh one at once. Call it when the API server returns from a
// restart: it answers every watch at an older resourceVersion with 410
// Expired, and each client-go informer then lists again only after the next
// step of a backoff that doubles from 800 ms to 30 s (jittered up to twice
// that) and resets only after 2 min without a failure. Restarts a minute
// apart left the first edit unrendered for up to 24 s
// (docs/operations.md#what-survives-a-fault); a fresh manager's informers
// list at once. No term, or one that started less than refreshMinInterval
// ago: nothing to do.
func (t *Terms) Refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stop == nil || time.Since(t.started) < refreshMinInterval {
		return
	}
	t.Log.Info("the API server is back: the term's manager starts afresh", "term", t.terms.Load())
	t.stop()
	t.stop = nil
}

// run starts mgr until ctx ends or Refresh stops it, and reports whether
// Refresh did.
func (t *Terms) run(ctx context.Context, mgr ctrl.Manager) (refreshed bool, err error) {
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	t.mu.Lock()
	t.stop, t.started = stop, time.Now()
	t.mu.Unlock()
	t.current.Store(&mgr)
	err = mgr.Start(mctx)
	t.current.Store(nil)
	t.mu.Lock()
	t.stop = nil
	t.mu.Unlock()
	return mctx.Err() != nil && ctx.Err() == nil, err
}

// Start campaigns, serves terms and campaigns again until ctx ends.
func (t *Terms) Start(ctx context.Context) error {
	if t.Alone {
		t.serve(ctx)
		return nil
	}
	id, err := identity()
	if err != nil {
		return err
	}
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, t.Namespace, t.Name,
		resourcelock.ResourceLockConfig{Identity: id}, t.Config, t.renewDeadline())
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(t.Config)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	// A holder that missed a renewal and whose pod is gone is released at
	// once (orphan.go); a second every, half a retry period of grace.
	go t.releaseOrphans(ctx, clientset, id, time.Second, or(t.RetryPeriod, 2*time.Second)+500*time.Millisecond)
	for ctx.Err() == nil {
		ended := make(chan struct{})
		var began atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: t.Name, ReleaseOnCancel: true,
			LeaseDuration: or(t.LeaseDuration, 15*time.Second), RenewDeadline: t.renewDeadline(),
			RetryPeriod: or(t.RetryPeriod, 2*time.Second),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					began.Store(true)
					defer close(ended)
					t.serve(lctx)
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
		if began.Load() {
			<-ended // the term has stopped: no two terms of this replica overlap
			if ctx.Err() == nil {
				t.Log.Info("lost the lease; the term ended, campaigning again", "identity", id)
			}
		}
	}
	return nil
}

// serve runs one term until lctx ends (the Lease lost or the replica
// stopping). A term whose manager cannot be built or fails is built again
// a second later while the Lease is held; one Refresh ended, at once.
func (t *Terms) serve(lctx context.Context) {
	n := t.terms.Add(1)
	t.leading.Store(true)
	defer t.leading.Store(false)
	t.Log.Info("leading: term begins", "term", n)
	for lctx.Err() == nil {
		mgr, err := t.NewTerm()
		if err == nil {
			var refreshed bool
			if refreshed, err = t.run(lctx, mgr); refreshed {
				t.fresh.Add(1)
				if t.Ready != nil {
					if err := t.Ready(lctx); err != nil && lctx.Err() == nil {
						t.Log.Error(err, "the API server is not ready; building the term's manager all the same", "term", n)
					}
				}
				continue
			}
		}
		if err != nil && lctx.Err() == nil {
			t.Log.Error(err, "the term's manager stopped; building it again", "term", n)
			select {
			case <-lctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	t.Log.Info("term ended", "term", n)
}

func (t *Terms) renewDeadline() time.Duration { return or(t.RenewDeadline, 10*time.Second) }

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// identity is the replica's name in the Lease: its host name (the pod's)
// and a random suffix, as controller-runtime names it, so two processes of
// one pod never share it.
func identity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return host + "_" + uuid.NewString(), nil
}
