package manager

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// What a tenant with the admin role in its own namespace can write and the
// manager must not hold (docs/manager.md, "What the manager caches").
const (
	tenantConfigMaps    = 200
	tenantConfigMapSize = 900 << 10
	// heapGrowthBound is what the manager's heap may grow by while the tenant
	// writes 200 × 900 KiB (180 MB): less than a tenth of it, so keeping even
	// 90 KiB of each object (a tenth) fails the test. What is measured is
	// noise (buffers, the other namespace's reconciles): 1-4 MiB.
	heapGrowthBound = 16 << 20
)

// TestManagerCachesNoTenantObject: 200 ConfigMaps of 900 KiB labelled as the
// manager's own, and 900 KiB added to the retry-policies ConfigMap the
// manager rendered, leave the manager's heap where it was, its cache without
// them, and a policy of another namespace is still rendered.
func TestManagerCachesNoTenantObject(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	h := startManager(t)
	ctx := context.Background()
	tenant := h.namespace(t, "tenant", nil)
	h.createPolicy(t, tenant, "api", nil, upstream("api", "api.tenant.svc"))
	rendered := h.configMap(t, tenant)
	before := heapInUse()

	big := strings.Repeat("x", tenantConfigMapSize)
	start := time.Now()
	for i := range tenantConfigMaps {
		must(t, h.c.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: fmt.Sprintf("filler-%03d", i),
				Labels: map[string]string{controller.ManagedByLabel: controller.ManagedByValue}},
			Data: map[string]string{v1alpha1.CACertificateKey: big},
		}))
	}
	// The tenant adds 900 KiB to the rendered ConfigMap too (an apply of the
	// manager does not remove a key another field manager owns).
	rendered.Data["filler"] = big
	must(t, h.c.Update(ctx, rendered))
	t.Logf("wrote %d ConfigMaps of %d KiB in %v", tenantConfigMaps+1, tenantConfigMapSize>>10, time.Since(start).Round(time.Millisecond))

	want, err := strconv.ParseUint(rendered.ResourceVersion, 10, 64)
	must(t, err)
	// The watch delivers in order: once the cache has the update of
	// retry-policies, it has seen every ConfigMap written before it.
	polltest.Until(t, 60*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := h.reconciler.Get(ctx, types.NamespacedName{Namespace: tenant, Name: v1alpha1.PoliciesConfigMapName}, &cm); err != nil {
			return err
		}
		// etcd's resource versions are increasing integers (envtest runs etcd).
		if have, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64); have < want {
			return fmt.Errorf("cache at resourceVersion %d, want %d", have, want)
		}
		if v, ok := cm.Data["filler"]; ok && v != "" {
			t.Errorf("the cached retry-policies holds the tenant's key filler (%d bytes)", len(v))
		}
		return nil
	})
	var cached corev1.ConfigMapList
	must(t, h.reconciler.List(ctx, &cached, client.InNamespace(tenant)))
	if n := len(cached.Items); n != 1 {
		t.Errorf("the manager's cache holds %d ConfigMaps of the tenant, want 1 (retry-policies)", n)
	}

	other := h.namespace(t, "other", nil)
	h.createPolicy(t, other, "api", nil, upstream("api", "api.other.svc"))
	h.configMap(t, other)

	after := heapInUse()
	grown := int64(after) - int64(before)
	t.Logf("manager heap in use: %.1f MiB before, %.1f MiB after (%+.1f MiB)", mib(int64(before)), mib(int64(after)), mib(grown))
	if grown > heapGrowthBound {
		t.Errorf("heap grew by %.1f MiB, want less than %.0f MiB", mib(grown), mib(heapGrowthBound))
	}
}

// heapInUse is the bytes of live heap after a full collection. The manager
// runs in this process; the API server and etcd do not.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
