package main_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/redistest"
)

// quotaFile writes a RetryPolicy whose upstream for host draws on the
// SharedQuota "partner" (rate per second, burst) kept in the Redis at addr.
func quotaFile(t *testing.T, host, addr string, rate, burst int, fields ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, p, policyYAML("test", "up", host, append([]string{"quotaRef: {name: partner}"}, fields...)...)+
		fmt.Sprintf(`---
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: partner}
spec:
  requestsPerSecond: %d
  burst: %d
  consumers: {namespaceSelector: {}}
  store: {redis: {address: %q}}
`, rate, burst, addr))
	return p
}

// Two sidecars given the same policy file share one quota through the store:
// the upstream sees at most rate × t + burst attempts from both together,
// however hard each is driven.
func TestTwoSidecarsShareOneQuota(t *testing.T) {
	redis := redistest.Start(t)
	up := newUpstream(t, status(http.StatusOK))
	const rate, burst = 40, 5
	file := quotaFile(t, up.host(), redis.Addr, rate, burst, "deadline: 200ms")
	sidecars := []*sidecar{startSidecar(t, "--policy-file", file), startSidecar(t, "--policy-file", file)}
	for _, s := range sidecars {
		s.waitMetric(`retry_sidecar_quota_store_state{quota="partner",state="reachable"}`, 1)
	}

	const d = 2 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	var ok, shed atomic.Int64
	for _, s := range sidecars {
		for range 4 { // each sidecar offers far more than the whole quota
			wg.Go(func() {
				for time.Since(start) < d {
					r := s.get(up.url("/"))
					switch r.status {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusServiceUnavailable:
						shed.Add(1)
					default:
						t.Errorf("status %d, want 200 or 503 (shed)", r.status)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	arrivals := len(up.got())
	most := int(rate*elapsed.Seconds()) + burst
	t.Logf("%d arrivals in %s (at most %d), %d shed", arrivals, elapsed, most, shed.Load())
	if arrivals > most {
		t.Errorf("the upstream saw %d attempts in %s, want at most rate × t + burst = %d", arrivals, elapsed, most)
	}
	if arrivals < most*70/100 {
		t.Errorf("the upstream saw %d attempts in %s, want at least 70 %% of %d: the quota was not used", arrivals, elapsed, most)
	}
	if shed.Load() == 0 {
		t.Errorf("no request was shed, yet the sidecars offered more than the quota")
	}
	for i, s := range sidecars {
		if n := s.metric(`retry_sidecar_quota_admissions_total{quota="partner"}`); n == 0 {
			t.Errorf("sidecar %d admitted nothing of the shared quota", i)
		}
	}
}
