package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// leaseAt is a reader holding the Lease as renewed at t (zero: no Lease);
// err is what every read returns instead.
type leaseAt struct {
	t   time.Time
	err error
}

func (l leaseAt) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if l.err != nil {
		return l.err
	}
	if !l.t.IsZero() {
		obj.(*coordinationv1.Lease).Spec.RenewTime = &metav1.MicroTime{Time: l.t}
	}
	return nil
}

func (leaseAt) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

func TestWatchHealth(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	away := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	tests := map[string]struct {
		caches []client.Reader
		direct client.Reader
		want   string
	}{
		"a cache a few seconds behind the API server is healthy": {
			caches: []client.Reader{leaseAt{t: now.Add(-3 * time.Second)}}, direct: leaseAt{t: now}},
		"a cache more than 2 minutes behind is a broken watch": {
			caches: []client.Reader{leaseAt{t: now.Add(-3 * time.Minute)}}, direct: leaseAt{t: now},
			want: "watches broken: cache 0 holds the Lease ops/lease renewed 3m0s before the API server's copy"},
		"the term's cache is checked too": {
			caches: []client.Reader{leaseAt{t: now}, leaseAt{t: now.Add(-5 * time.Minute)}}, direct: leaseAt{t: now},
			want: "watches broken: cache 1 holds"},
		"with the API server away there is nothing to compare": {
			caches: []client.Reader{leaseAt{t: now.Add(-10 * time.Minute)}}, direct: leaseAt{err: away}},
		"a cache not synced yet is skipped": {
			caches: []client.Reader{leaseAt{err: errors.New("not synced")}}, direct: leaseAt{t: now}},
		"no leader renewing (no renew time) is nothing to compare": {
			caches: []client.Reader{leaseAt{t: now.Add(-10 * time.Minute)}}, direct: leaseAt{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := &WatchHealth{Caches: func() []client.Reader { return tc.caches }, Direct: tc.direct,
				Lease: types.NamespacedName{Namespace: "ops", Name: "lease"}}
			err := w.Check(nil)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
				t.Errorf("Check = %q, want %q", got, tc.want)
			}
		})
	}
}

// With the rights the install gives the manager (config/rbac), its cache
// watches the one Lease and follows its renewals: the canary is alive.
func TestTheLeaseCanaryFollowsRenewals(t *testing.T) {
	cfg := testenv.Start(t, nil)
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "retry-operator-system"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("leader"), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := admin.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: LeaderElectionID}
	opts := Options(ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	WithLeaseCanary(&opts.Cache, key)
	mcfg := testenv.ManagerConfig(t, cfg, ns)
	mgr, err := ctrl.NewManager(mcfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(StartLeaseCanary(mgr)); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })

	renewed := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	if err := admin.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	var cached coordinationv1.Lease
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := mgr.GetCache().Get(ctx, key, &cached)
		if err == nil && cached.Spec.RenewTime != nil && cached.Spec.RenewTime.Time.Equal(renewed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cached Lease did not follow the renewal within 10 s (%v, %+v)", err, cached.Spec.RenewTime)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w := &WatchHealth{Caches: func() []client.Reader { return []client.Reader{mgr.GetCache()} }, Direct: mgr.GetAPIReader(), Lease: key}
	if err := w.Check(nil); err != nil {
		t.Errorf("Check with a live watch: %v", err)
	}
	var other coordinationv1.LeaseList
	if err := mgr.GetCache().List(ctx, &other, client.InNamespace("default")); err == nil && len(other.Items) > 0 {
		t.Errorf("the cache holds Leases of another namespace: %d", len(other.Items))
	}
}
