package manager

import (
	"context"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// A replica whose pod is deleted cannot give up the Lease: its
// service-account token is bound to the pod and refused from the moment the
// pod is gone, so its renewals and its release on SIGTERM fail alike, and the
// other replicas waited for the Lease to expire (15 s; 16.3–20.2 s from the
// kill to the takeover in the chaos runs, docs/development.md). The same
// refusal makes it safe to take the Lease at once: a holder whose pod is gone
// can no longer write anything as a leader.

// orphaned reports whether lease is held by another replica whose pod no
// longer exists (podGone) and that has missed a renewal: renewed longer
// than stale before now. Both are needed: a replica outside a pod (a local
// run, whose identity names no pod) renews on time, and one whose renewal is
// merely late still has its pod.
func orphaned(lease *coordinationv1.Lease, self string, podGone bool, now time.Time, stale time.Duration) bool {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" || holder == self || !podGone || lease.Spec.RenewTime == nil {
		return false
	}
	return now.Sub(lease.Spec.RenewTime.Time) > stale
}

// holderPod is the pod named by a Lease holder's identity ("pod_uuid").
func holderPod(lease *coordinationv1.Lease) string {
	pod, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
	return pod
}

// releaseOrphans looks at the Lease every `every` until ctx ends and, when
// it is orphaned, releases it as its holder would have (an empty holder, a
// 1 s duration), so that the replicas' elections take it at their next try.
// The update carries the Lease's resourceVersion: a holder that renewed in
// between keeps it.
func (t *Terms) releaseOrphans(ctx context.Context, c kubernetes.Interface, self string, every, stale time.Duration) {
	leases := c.CoordinationV1().Leases(t.Namespace)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lease, err := leases.Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil || t.Leading() {
			continue
		}
		// The pod is asked for only once the holder has missed a renewal:
		// a Lease renewed on time needs no second request.
		if !orphaned(lease, self, true, time.Now(), stale) {
			continue
		}
		if _, err := c.CoreV1().Pods(t.Namespace).Get(ctx, holderPod(lease), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			continue
		}
		gone := ptr.Deref(lease.Spec.HolderIdentity, "")
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
		lease.Spec.RenewTime, lease.Spec.AcquireTime = &now, &now
		if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Log.Info("could not release the Lease of a replica whose pod is gone", "holder", gone, "error", err.Error())
			continue
		}
		t.Log.Info("released the Lease of a replica whose pod is gone", "holder", gone)
	}
}
