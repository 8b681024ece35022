package main_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
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
		// Every admission is in the wait histogram, and some waited for a lease.
		n := s.metric(`retry_sidecar_quota_admissions_total{quota="partner"}`)
		if waits := s.metric(`retry_sidecar_quota_admission_wait_seconds_count{quota="partner"}`); waits != n {
			t.Errorf("sidecar %d: %v admissions in the wait histogram, want all %v", i, waits, n)
		}
		if onHand := s.metric(`retry_sidecar_quota_admission_wait_seconds_bucket{quota="partner",le="0"}`); onHand >= n {
			t.Errorf("sidecar %d: %v of %v admissions found a token on hand, want some to have waited for a lease", i, onHand, n)
		}
	}
}

// A password rotated in the credentials file of a store the sidecar reaches
// itself reaches it without a restart (a policy file's
// --quota-credentials-file; here the file a document of an older manager
// names): the store's
// user gets a second password, the kubelet rewrites the file, the first
// password is removed and the user's connections closed. The sidecar's quota
// client connects again with the new password, and a steady stream of
// requests through it is admitted all along.
func TestRotatedQuotaPasswordIsPickedUpWithoutRestart(t *testing.T) {
	redis := redistest.Start(t, redistest.WithPassword("admin-secret"))
	admin := redis.Client()
	ctx, cancel := withCancel(20 * time.Second)
	defer cancel()
	const ns = "shop"
	user := "retry-operator:ns:" + ns
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">first-password", "~"+v1alpha1.QuotaKeys("partner")+"*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	credsDir := t.TempDir() // as the kubelet writes a mounted volume
	writeCreds := func(password string) {
		kubeletWrite(t, credsDir, map[string]string{"credentials": string(policyset.Credentials{Username: user, Password: password}.Format())})
	}
	writeCreds("first-password")

	up := newUpstream(t, status(http.StatusOK))
	s := startSidecarReadingQuotaCredentials(t, up, redis.Addr, filepath.Join(credsDir, "credentials"))
	reachable := `retry_sidecar_quota_store_state{quota="partner",state="reachable"}`
	s.waitMetric(reachable, 1)

	// A steady stream through the sidecar for the whole rotation.
	stream := startSteadyStream(t, s, up)
	defer stream.stop()

	loads := func() int { return strings.Count(s.logs.String(), `"msg":"configuration loaded"`) }
	before := loads()
	if err := admin.Do(ctx, "ACL", "SETUSER", user, ">second-password").Err(); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	writeCreds("second-password")
	for loads() == before {
		if time.Since(rotated) > 5*time.Second {
			t.Fatalf("5 s after the credentials file was rewritten the sidecar has not reloaded it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	reloaded := time.Since(rotated)
	// Only the new password opens a connection now.
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "<first-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", user).Err(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitUntilConnectedAgain(ctx, t, admin, s, user, reachable)
	back := time.Since(killed)
	time.Sleep(500 * time.Millisecond) // the stream goes on on the new connection
	stream.stop()
	if n := s.metric(`retry_sidecar_quota_store_errors_total{quota="partner",state="refused"}`); n > 0 {
		t.Errorf("the store refused the sidecar %v times: it used the old password", n)
	}
	t.Logf("file rewritten → reloaded in %s; old password removed → connected again with the new one in %s; %d of %d requests admitted",
		reloaded.Round(time.Millisecond), back.Round(time.Millisecond), stream.admitted.Load(), stream.sent.Load())
}

// startSidecarReadingQuotaCredentials starts a sidecar whose mounted
// document, as an older manager rendered it, has a policy for up drawing on
// the SharedQuota "partner" in the Redis at addr, reached with the
// credentials in credsFile.
func startSidecarReadingQuotaCredentials(t *testing.T, up *upstream, addr, credsFile string) *sidecar {
	t.Helper()
	doc, err := policyset.FromPolicyFiles([]byte(policyYAML("test", "up", up.host(), "quotaRef: {name: partner}", "deadline: 2s") + fmt.Sprintf(`---
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: partner}
spec:
  requestsPerSecond: 1000
  burst: 10
  consumers: {namespaceSelector: {}}
  store: {redis: {address: %q}}
`, addr)))
	if err != nil {
		t.Fatal(err)
	}
	doc.Revision = 1
	doc.Quotas[0].Store.Redis.CredentialsFile = credsFile
	policies, err := policyset.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	cmDir := t.TempDir()
	kubeletWrite(t, cmDir, map[string]string{"policies.json": string(policies)})
	return startSidecar(t, "--config-dir", cmDir)
}

// steadyStream sends requests one after another through a sidecar, every
// 10 ms, each of which must be answered 200, until stop.
type steadyStream struct {
	sent, admitted atomic.Int64
	stop           func() // stops the stream and waits for its last request; idempotent
}

func startSteadyStream(t *testing.T, s *sidecar, up *upstream) *steadyStream {
	stream := &steadyStream{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := s.get(up.url("/steady"))
			stream.sent.Add(1)
			if r.status == http.StatusOK {
				stream.admitted.Add(1)
			} else {
				t.Errorf("request %d during the rotation: status %d (%s), want 200", stream.sent.Load(), r.status, r.header.Get("X-Retry-Outcome"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	stream.stop = sync.OnceFunc(func() { close(stop); wg.Wait() })
	return stream
}

// waitUntilConnectedAgain waits up to 5 s until the store lists a connection
// of user and the sidecar reports the store reachable again.
func waitUntilConnectedAgain(ctx context.Context, t *testing.T, admin *redis.Client, s *sidecar, user, reachable string) {
	t.Helper()
	killed := time.Now()
	for {
		clients, err := admin.Do(ctx, "CLIENT", "LIST").Text()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(clients, "user="+user+" ") && s.metric(reachable) == 1 {
			return
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("5 s after the old password was removed: store state reachable = %v, connections:\n%s", s.metric(reachable), clients)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
