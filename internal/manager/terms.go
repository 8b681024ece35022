package manager

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
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
	// Alone skips the election: one term for the life of the replica (a
	// single replica run without --leader-elect).
	Alone bool
	Log   logr.Logger

	leading atomic.Bool
	terms   atomic.Int64
	current atomic.Pointer[ctrl.Manager] // the running term's, nil between terms
}

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
// a second later while the Lease is held.
func (t *Terms) serve(lctx context.Context) {
	n := t.terms.Add(1)
	t.leading.Store(true)
	defer t.leading.Store(false)
	t.Log.Info("leading: term begins", "term", n)
	for lctx.Err() == nil {
		mgr, err := t.NewTerm()
		if err == nil {
			t.current.Store(&mgr)
			err = mgr.Start(lctx)
			t.current.Store(nil)
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
