package main_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
)

// consumers is the namespaces of a quota, changed while the endpoint serves.
type consumers struct {
	mu     sync.Mutex
	quotas leaseserver.StaticQuotas
}

func (c *consumers) Quota(ctx context.Context, name, ns string) (*v1alpha1.SharedQuota, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quotas.Quota(ctx, name, ns)
}

// TestASidecarLeasesFromTheEndpointUntilRevoked: the sidecar binary, given
// what the manager renders (a quota naming the lease endpoint, its CA and
// the token file), leases from a real endpoint over HTTPS with a real
// redis-server behind it and holds no store credential. Once its namespace
// leaves the consumers it reports the state revoked and answers every
// attempt locally (429, deferred), although onStoreLoss is LastShare.
func TestASidecarLeasesFromTheEndpointUntilRevoked(t *testing.T) {
	redis := redistest.Start(t)
	up := newUpstream(t, status(http.StatusOK))
	doc, err := policyset.FromPolicyFiles([]byte(policyYAML("test", "up", up.host(), "quotaRef: {name: partner}", "deadline: 1s") + fmt.Sprintf(`---
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: partner}
spec:
  requestsPerSecond: 200
  burst: 20
  onStoreLoss: LastShare
  consumers: {namespaceSelector: {}}
  store: {redis: {address: %q}}
`, redis.Addr)))
	if err != nil {
		t.Fatal(err)
	}
	quotas := map[string]*v1alpha1.SharedQuota{"partner": {
		ObjectMeta: metav1.ObjectMeta{Name: "partner"},
		Spec: v1alpha1.SharedQuotaSpec{RequestsPerSecond: ptrTo[int32](200), Burst: ptrTo[int32](20),
			Consumers: &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
			Store:     v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: redis.Addr}}}}}
	c := &consumers{quotas: leaseserver.StaticQuotas{Quotas: quotas, Namespaces: map[string]map[string]string{"shop": {"team": "payments"}}}}
	store := redisstore.New(redisstore.Options{Address: redis.Addr, KeyPrefix: v1alpha1.QuotaKeys})
	t.Cleanup(func() { store.Close() })
	endpoint := httptest.NewTLSServer(leaseserver.New(leaseserver.StaticTokens{"pod-token": {Namespace: "shop", Pod: "a", PodUID: "1"}}, c,
		leaseserver.StoresFunc(func(context.Context, v1alpha1.RedisStore) (leaseserver.Store, error) { return store, nil }), logr.Discard(), nil))
	t.Cleanup(endpoint.Close)

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc.Revision = 1
	doc.Quotas[0].Store = nil
	doc.Quotas[0].Lease = &policyset.QuotaLease{URL: "https://example.com:443", Address: endpoint.Listener.Addr().String(),
		CABundle: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: endpoint.Certificate().Raw})), TokenFile: tokenFile}
	policies, err := policyset.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	cmDir := t.TempDir()
	kubeletWrite(t, cmDir, map[string]string{"policies.json": string(policies)})
	s := startSidecar(t, "--config-dir", cmDir)
	s.waitMetric(`retry_sidecar_quota_store_state{quota="partner",state="reachable"}`, 1)
	for i := range 5 {
		if r := s.get(up.url("/leased")); r.status != http.StatusOK {
			t.Fatalf("request %d through a reachable endpoint: %d (%s), want 200", i, r.status, r.header.Get("X-Retry-Outcome"))
		}
	}

	c.mu.Lock()
	c.quotas.Namespaces["shop"] = map[string]string{"team": "search"}
	c.mu.Unlock()
	s.waitMetric(`retry_sidecar_quota_store_state{quota="partner",state="revoked"}`, 1)
	before := len(up.got())
	for i := range 5 {
		r := s.get(up.url("/revoked"))
		if r.status != http.StatusTooManyRequests || r.header.Get("X-Retry-Outcome") != "deferred" {
			t.Errorf("request %d once revoked: %d %q, want 429 deferred", i, r.status, r.header.Get("X-Retry-Outcome"))
		}
	}
	if n := len(up.got()) - before; n != 0 {
		t.Errorf("the upstream saw %d attempts once the namespace was revoked, want 0", n)
	}
	if n := s.metric(`retry_sidecar_quota_store_errors_total{quota="partner",state="revoked"}`); n < 1 {
		t.Errorf("retry_sidecar_quota_store_errors_total{state=revoked} = %v, want at least 1", n)
	}
}

func ptrTo[T any](v T) *T { return &v }
