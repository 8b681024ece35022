package leaseclient_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/leaseclient"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// lockedQuotas is StaticQuotas whose namespaces' labels a test may change
// while the endpoint serves.
type lockedQuotas struct {
	mu sync.Mutex
	q  leaseserver.StaticQuotas
}

func (l *lockedQuotas) Quota(ctx context.Context, name, ns string) (*v1alpha1.SharedQuota, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.q.Quota(ctx, name, ns)
}

func (l *lockedQuotas) relabel(ns, team string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.q.Namespaces[ns] = map[string]string{"team": team}
}

// TestARevokedNamespaceIsDeniedAtOnceAndItsShareGoesToTheOthers: two
// namespaces lease from the endpoint (a real redis-server behind it) with
// onStoreLoss LastShare; one is relabelled out of the consumers. Its client
// is revoked by its next lease and admits nothing, and the store no longer
// counts its pod by then, so the other's next lease sees a fleet of one.
func TestARevokedNamespaceIsDeniedAtOnceAndItsShareGoesToTheOthers(t *testing.T) {
	srv := redistest.Start(t)
	q := &v1alpha1.SharedQuota{Spec: v1alpha1.SharedQuotaSpec{
		RequestsPerSecond: ptr.To[int32](50), Burst: ptr.To[int32](10),
		OnStoreLoss: ptr.To(v1alpha1.StoreLossLastShare),
		Consumers:   &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
		Store:       v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: srv.Addr}},
	}}
	q.Name = "partner"
	quotas := &lockedQuotas{q: leaseserver.StaticQuotas{Quotas: map[string]*v1alpha1.SharedQuota{"partner": q},
		Namespaces: map[string]map[string]string{"shop": {"team": "payments"}, "bank": {"team": "payments"}}}}
	store := redisstore.New(redisstore.Options{Address: srv.Addr, KeyPrefix: v1alpha1.QuotaKeys})
	t.Cleanup(func() { store.Close() })
	tokens := leaseserver.StaticTokens{"tok-shop": {Namespace: "shop", Pod: "a", PodUID: "1"}, "tok-bank": {Namespace: "bank", Pod: "b", PodUID: "2"}}
	h := leaseserver.New(tokens, quotas, leaseserver.StoresFunc(func(context.Context, v1alpha1.RedisStore) (leaseserver.Store, error) {
		return store, nil
	}), logr.Discard(), nil)
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})

	spec := quota.Spec{Name: "partner", RequestsPerSecond: 50, Burst: 10, OnStoreLoss: quota.StoreLossLastShare}
	client := func(token string) *quota.Client {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := leaseclient.New(leaseclient.Options{URL: "https://example.com:443", Address: ts.Listener.Addr().String(), CABundle: ca, TokenFile: file})
		if err != nil {
			t.Fatal(err)
		}
		c := quota.New(spec, s, clock.Real{}, quota.Pod{Name: token}, nil, quota.Observer{})
		t.Cleanup(c.Close)
		if err := c.Start(); err != nil {
			t.Fatalf("first lease as %s: %v", token, err)
		}
		return c
	}
	shop, bank := client("tok-shop"), client("tok-bank")
	keepAsking := func(c *quota.Client) {
		for range 3 {
			c.TakeAt(time.Now(), 0, 0)
		}
	}
	keepAsking(shop)
	keepAsking(bank)
	if pods := storedPods(t, store); !slices.Equal(pods, []string{"bank/b", "shop/a"}) {
		t.Fatalf("pods = %v, want [bank/b shop/a]", pods)
	}

	quotas.relabel("bank", "search")
	start := time.Now()
	// Its next lease is due within quota.Interval; allow a loaded machine
	// twice that, and the test's polling.
	polltest.Until(t, 5*time.Second, func() error {
		keepAsking(bank)
		if s := bank.Stats().State; s != quota.StateRevoked {
			return fmt.Errorf("bank's state = %s, want revoked", s)
		}
		return nil
	})
	took := time.Since(start)
	for i := range 5 {
		if _, v := bank.TakeAt(time.Now(), 0, 0); v != limits.QuotaDenied {
			t.Fatalf("attempt %d of the revoked namespace = verdict %d, want denied (whatever LastShare says)", i, v)
		}
	}
	if pods := storedPods(t, store); !slices.Equal(pods, []string{"shop/a"}) {
		t.Errorf("pods once bank is revoked = %v, want [shop/a]: its share goes back to the others", pods)
	}
	if s := shop.Stats().State; s != quota.StateReachable {
		t.Errorf("shop's state = %s, want reachable", s)
	}
	t.Logf("revoked %s after the relabel (lease interval %s)", took.Round(time.Millisecond), quota.Interval)
}

// storedPods are the pods store records for the quota partner.
func storedPods(t *testing.T, store *redisstore.Store) []string {
	t.Helper()
	pods, err := store.Pods(t.Context(), quota.Spec{Name: "partner"})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}
