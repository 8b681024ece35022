package manager

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

func TestALeaseIsOrphanedOnlyWhenItsHolderPodIsGoneAndItMissedARenewal(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		if renewedAgo >= 0 {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-renewedAgo)))
		}
		return l
	}
	for _, c := range []struct {
		name    string
		lease   *coordinationv1.Lease
		podGone bool
		want    bool
	}{
		{"a holder whose pod is gone and that has not renewed for 3 s is orphaned", lease("mgr-a_1", 3*time.Second), true, true},
		{"a holder whose pod is gone but that renewed 1 s ago keeps it (a local run names no pod)", lease("mgr-a_1", time.Second), true, false},
		{"a holder whose pod exists keeps it however late its renewal", lease("mgr-a_1", time.Minute), false, false},
		{"this replica's own Lease is never released by itself", lease("mgr-b_2", time.Minute), true, false},
		{"a released Lease (no holder) has nothing to release", lease("", time.Minute), true, false},
		{"a Lease never renewed is left to the election", lease("mgr-a_1", -1), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := orphaned(c.lease, "mgr-b_2", c.podGone, now, 2500*time.Millisecond); got != c.want {
				t.Errorf("orphaned = %t, want %t", got, c.want)
			}
		})
	}
	if got := holderPod(lease("retry-operator-controller-manager-6c96-8r4lq_0b2f", 0)); got != "retry-operator-controller-manager-6c96-8r4lq" {
		t.Errorf("holderPod = %q", got)
	}
}

// On a real API server: the Lease of a replica whose pod does not exist and
// that stopped renewing is released within a look or two; one held by a
// replica whose pod exists is left alone.
func TestOrphanedLeasesAreReleasedOnARealAPIServer(t *testing.T) {
	cfg := testenv.Start(t, &envtest.Environment{})
	c := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alive := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mgr-alive", Namespace: "ops"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "m"}}}}
	if _, err := c.CoreV1().Pods("ops").Create(ctx, alive, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-10 * time.Second))
	for name, holder := range map[string]string{"gone": "mgr-gone_1", "alive": "mgr-alive_2"} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ops"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &old}}
		if _, err := c.CoordinationV1().Leases("ops").Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		terms := &Terms{Namespace: "ops", Name: name, Log: ctrl.Log.WithName(name)}
		go terms.releaseOrphans(ctx, c, "mgr-self_3", 50*time.Millisecond, 2500*time.Millisecond)
	}
	holder := func(name string) string {
		l, err := c.CoordinationV1().Leases("ops").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	for start := time.Now(); holder("gone") != ""; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the Lease of the gone replica is still held by %q after 10 s", holder("gone"))
		}
	}
	time.Sleep(300 * time.Millisecond) // six more looks at the other one
	if got := holder("alive"); got != "mgr-alive_2" {
		t.Errorf("the Lease of a replica whose pod exists is held by %q, want mgr-alive_2", got)
	}
}
