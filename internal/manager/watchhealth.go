package manager

import (
	"context"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// WatchHealth is the manager's liveness check: a replica whose watches stay
// broken fails it, and the kubelet restarts it, instead of a Ready replica
// that no longer sees a change (docs/operations.md#what-survives-a-fault).
//
// The canary is the leader's Lease, which the leader renews every few
// seconds: each manager watches that one object, and its copy falls behind
// only when its watches do. A copy older than Stale than the API server's
// own is a broken watch. With the API server away, or no leader renewing,
// there is nothing to compare and the check passes: a restart would mend
// nothing then.
type WatchHealth struct {
	// Caches are the caches whose watches are checked: the replica's, and
	// the current term's while it leads. Each must watch the Lease
	// (WithLeaseCanary).
	Caches func() []client.Reader
	// Direct reads the API server past any cache.
	Direct client.Reader
	Lease  types.NamespacedName
	// Stale is how far behind the API server's copy a cached copy may be;
	// zero is 2 minutes, longer than client-go's slowest relist (30 s to 60 s
	// between attempts).
	Stale time.Duration
}

// Check is a healthz.Checker.
func (w *WatchHealth) Check(req *http.Request) error {
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	stale := w.Stale
	if stale <= 0 {
		stale = 2 * time.Minute
	}
	var direct *coordinationv1.Lease
	for i, c := range w.Caches() {
		var cached coordinationv1.Lease
		if err := c.Get(ctx, w.Lease, &cached); err != nil || cached.Spec.RenewTime == nil {
			continue // not synced yet, or no Lease yet
		}
		if direct == nil {
			direct = &coordinationv1.Lease{}
			if err := w.Direct.Get(ctx, w.Lease, direct); err != nil || direct.Spec.RenewTime == nil {
				return nil // the API server away: nothing to compare
			}
		}
		if behind := direct.Spec.RenewTime.Sub(cached.Spec.RenewTime.Time); behind > stale {
			return fmt.Errorf("watches broken: cache %d holds the Lease %s renewed %s before the API server's copy", i, w.Lease, behind.Round(time.Second))
		}
	}
	return nil
}

// WithLeaseCanary adds the Lease to the cache options o (that one object:
// its namespace, its name); StartLeaseCanary starts its informer, so
// WatchHealth can read it from the cache.
func WithLeaseCanary(o *cache.Options, lease types.NamespacedName) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&coordinationv1.Lease{}] = cache.ByObject{
		Namespaces: map[string]cache.Config{lease.Namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", lease.Name),
	}
}

// StartLeaseCanary is a runnable that starts mgr's informer of the Lease.
func StartLeaseCanary(mgr manager.Manager) manager.RunnableFunc {
	return func(ctx context.Context) error {
		_, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{})
		return err
	}
}
