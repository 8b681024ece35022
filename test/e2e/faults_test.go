//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// Faults survived (docs/operations.md, "What survives a fault"): the API server
// restarted under watching sidecars, and a sidecar container killed with
// requests in flight. Both need the node's processes, so they run on the local
// cluster only (hack/test-e2e.sh local sets E2E_LOCAL_CLUSTER to
// hack/local-cluster.sh); the leader-killed case is in e2e_test.go.

// localCluster runs hack/local-cluster.sh with args, or skips the case on
// other clusters.
func (s *suite) localCluster(t *testing.T, args ...string) {
	t.Helper()
	script := os.Getenv("E2E_LOCAL_CLUSTER")
	if script == "" {
		t.Skip("needs the local cluster (E2E_CLUSTER=local sets E2E_LOCAL_CLUSTER): the fault is made by stopping or killing the node's processes")
	}
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s:\n%s", script, strings.Join(args, " "), strings.TrimSpace(string(out)))
}

// podDirect reaches a pod at its IP, not through the API server: the local
// cluster's pod network is routed on the host the suite runs on.
type podDirect struct{ ip string }

func (p podDirect) get(path string) ([]byte, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + p.ip + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return b, err
}

// config is the sidecar's /config on the stats port.
func (p podDirect) config() (policyset.ConfigStatus, error) {
	var c policyset.ConfigStatus
	b, err := p.get(":" + strconv.Itoa(statsPort) + "/config")
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	return c, err
}

// metric is one series of the sidecar's /metrics; -1 if absent.
func (p podDirect) metric(series string) (float64, error) {
	b, err := p.get(":" + strconv.Itoa(statsPort) + "/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return -1, nil
}

// call is the demo app's /call of the flaky upstream's path.
func (p podDirect) call(upstream, method, path string) (report, error) {
	q := url.Values{"url": {"http://" + upstream + path}, "method": {method}}
	var r report
	b, err := p.get(":8080/call?" + q.Encode())
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// apiServerRestarted stops the API server while the app pod's sidecar watches
// retry-policies through it, and checks that the sidecar keeps serving the
// configuration in force (a call through it still makes maxAttempts), that its
// watch resumes within 5 s once the API server is back, and that edits made
// then reach it within 5 s of their rendering.
func (s *suite) apiServerRestarted(t *testing.T) {
	direct, before := s.appPodFollowingTheWatch(t)
	attempts := int(ptr.Deref(findUpstream(t, s.renderedPolicies(t), s.ns, policyName).MaxAttempts, 0))

	stopped := false
	t.Cleanup(func() {
		if stopped {
			s.localCluster(t, "start-apiserver")
		}
	})
	s.localCluster(t, "stop-apiserver")
	stopped = true
	downAt := time.Now()
	s.eventuallyDirect(t, 10*time.Second, "the sidecar to notice the API server is gone", func() (bool, string) {
		v, err := direct.metric("retry_sidecar_config_api_up")
		return err == nil && v == 0, fmt.Sprintf("retry_sidecar_config_api_up = %v (%v)", v, err)
	})
	noticed := time.Since(downAt)
	held, err := direct.config()
	if err != nil || held.Revision < before.Revision {
		t.Fatalf("/config with the API server down = %+v (%v), want revision %d or later", held, err, before.Revision)
	}
	r, err := direct.call(s.upstream, "GET", "/always-503")
	if err != nil {
		t.Fatalf("a call through the sidecar with the API server down: %v", err)
	}
	r.want(t, http.StatusServiceUnavailable, "exhausted", attempts)
	if during, err := direct.config(); err != nil || during.Revision != held.Revision || during.Hash != held.Hash {
		t.Errorf("/config with the API server down = %+v (%v), want revision %d, %s still in force", during, err, held.Revision, held.Hash)
	}
	t.Logf("API server down: the sidecar noticed after %s and still runs revision %d (source %s); an outage request through it: %s after %s attempts",
		noticed.Round(10*time.Millisecond), held.Revision, held.Source, r.outcome(), r.Headers["X-Retry-Attempts"])

	s.localCluster(t, "start-apiserver")
	stopped = false
	backAt := time.Now()
	t.Logf("API server down for %s (stop, checks, start until /readyz)", backAt.Sub(downAt).Round(100*time.Millisecond))
	s.eventuallyDirect(t, 30*time.Second, "the sidecar's watch to resume", func() (bool, string) {
		v, err := direct.metric("retry_sidecar_config_api_up")
		return err == nil && v == 1, fmt.Sprintf("retry_sidecar_config_api_up = %v (%v)", v, err)
	})
	resumed := time.Since(backAt)
	s.waitPolicyWebhookAdmitsAnEdit(t)
	admitted := time.Since(backAt)

	other := 3
	if attempts == 3 {
		other = 2
	}
	for i, n := range []int{other, attempts} { // back to where it was for the cases after this one
		rendered, arrived := s.editAndTrace(t, direct, n)
		s.call(t, "GET", "/always-503", "").want(t, http.StatusServiceUnavailable, "exhausted", n)
		t.Logf("edit %d after the restart: rendered into the ConfigMap %s after it was accepted, in the sidecar %s after that (%s in all)",
			i+1, rendered.Round(time.Millisecond), arrived.Round(time.Millisecond), (rendered + arrived).Round(time.Millisecond))
		// The sidecar's part of the promise. The manager's part (accepted →
		// rendered) waits for its own watches to come back, which client-go
		// paces (up to 30 s between attempts): logged, not asserted here.
		if arrived > 5*time.Second {
			t.Errorf("edit %d: the ConfigMap's new revision reached the sidecar %s after it was written; want within 5 s", i+1, arrived.Round(time.Millisecond))
		}
	}
	t.Logf("after the API server was ready: the sidecar's watch resumed in %s, the webhook admitted edits after %s",
		resumed.Round(10*time.Millisecond), admitted.Round(100*time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("the sidecar's watch resumed %s after the API server was ready; want within 5 s", resumed.Round(10*time.Millisecond))
	}
}

// appPodFollowingTheWatch is the app pod's sidecar, reached directly from
// this host, and its /config, which must come from the API watch.
func (s *suite) appPodFollowingTheWatch(t *testing.T) (podDirect, policyset.ConfigStatus) {
	var pod corev1.Pod
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&s.appPod), &pod); err != nil {
		t.Fatal(err)
	}
	direct := podDirect{ip: pod.Status.PodIP}
	before, err := direct.config()
	if err != nil {
		t.Fatalf("the suite cannot reach the app pod at %s from this host: %v", pod.Status.PodIP, err)
	}
	if before.Source != "api" {
		t.Fatalf("/config source %q before the restart, want api (the watch)", before.Source)
	}
	return direct, before
}

// waitPolicyWebhookAdmitsAnEdit waits up to a minute until the policy
// webhook admits a dry-run edit. The edit goes through the policy webhook
// (failurePolicy Fail): the manager's Service must route again, which is the
// cluster's part.
func (s *suite) waitPolicyWebhookAdmitsAnEdit(t *testing.T) {
	s.eventually(t, time.Minute, "the policy webhook to admit an edit (dry run)", func() (bool, string) {
		rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: policyName}}
		err := s.c.Patch(context.Background(), rp, client.RawPatch(types.JSONPatchType,
			[]byte(`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":5}]`)), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
}

// editAndTrace sets maxAttempts of the policy and returns the time from the
// accepted edit until the ConfigMap holds a newer revision (the manager's
// part) and from then until the sidecar runs it (the sidecar's part), both
// read every 20 ms: the ConfigMap through the API server, the sidecar at its
// pod IP.
func (s *suite) editAndTrace(t *testing.T, direct podDirect, attempts int) (rendered, arrived time.Duration) {
	t.Helper()
	was := s.renderedPolicies(t).Revision
	edited := time.Now()
	s.patchPolicy(t, fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":%d}]`, attempts))
	var inCM time.Time
	for time.Since(edited) < 150*time.Second {
		if inCM.IsZero() && s.renderedPolicies(t).Revision > was {
			inCM = time.Now()
		}
		if c, err := direct.config(); err == nil && c.Revision > was {
			now := time.Now()
			if inCM.IsZero() {
				inCM = now
			}
			return inCM.Sub(edited), now.Sub(inCM)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the edit to maxAttempts %d is not in the sidecar %s after it was accepted (in the ConfigMap: %v)", attempts, time.Since(edited).Round(time.Second), !inCM.IsZero())
	return 0, 0
}

// sidecarKilled kills the app pod's sidecar container (SIGKILL, as a crash)
// while requests are in flight through it — two waiting out a Retry-After in
// the sidecar, three held by the upstream — and checks that each one fails at
// the app, that the upstream saw each exactly once (nothing replayed by the
// restarted sidecar, nor by anyone), that only the sidecar restarted, and that
// requests succeed again once it is back.
func (s *suite) sidecarKilled(t *testing.T) {
	if os.Getenv("E2E_LOCAL_CLUSTER") == "" {
		s.localCluster(t) // skips
	}
	before := s.liveAppPod(t)
	inflight := []struct{ method, path, key string }{
		{"GET", "/sequence/429:3,200", ""}, // waits 3-3.5 s in the sidecar, then would retry
		{"GET", "/sequence/429:3,200", ""},
		{"GET", "/slow/4500", ""}, // held by the upstream (under perTryTimeout 5s)
		{"POST", "/slow/4500", ""},
		{"POST", "/slow/4500", "order-" + randomSuffix()}, // replayable with its key, still sent once
	}
	ids := make([]string, len(inflight))
	reports := make([]report, len(inflight))
	errs := make([]error, len(inflight))
	var wg sync.WaitGroup
	for i, c := range inflight {
		ids[i] = "killed-" + strconv.Itoa(i) + "-" + randomSuffix()
		wg.Add(1)
		go func() {
			defer wg.Done()
			params := map[string]string{"url": "http://" + s.upstream + c.path, "method": c.method, "id": ids[i]}
			if c.key != "" {
				params["key"] = c.key
			}
			reports[i], errs[i] = s.tryCall(params)
		}()
	}
	s.eventually(t, 3*time.Second, "every request to reach the upstream once", func() (bool, string) {
		for i, id := range ids {
			if n := len(s.arrivals(t, id)); n != 1 {
				return false, fmt.Sprintf("request %d (%s %s): %d arrivals", i, inflight[i].method, inflight[i].path, n)
			}
		}
		return true, ""
	})
	s.localCluster(t, "kill-container", s.ns, before.Name, sidecarName)
	killed := time.Now()
	wg.Wait()
	t.Logf("the %d calls in flight came back %s after the kill", len(inflight), time.Since(killed).Round(10*time.Millisecond))

	var back time.Duration
	s.eventually(t, time.Minute, "a call through the restarted sidecar to succeed", func() (bool, string) {
		r, err := s.tryCall(map[string]string{"url": "http://" + s.upstream + "/flaky", "method": "GET"})
		if err != nil || r.Error != "" || r.Status != http.StatusOK || r.outcome() != "success" {
			return false, fmt.Sprintf("%v %s status %d outcome %q", err, r.Error, r.Status, r.outcome())
		}
		back = time.Since(killed)
		return true, ""
	})
	// Past the Retry-After the sidecar would have waited: a replay would be there by now.
	time.Sleep(time.Until(killed.Add(4 * time.Second)))
	for i, c := range inflight {
		r := reports[i]
		switch {
		case errs[i] != nil:
			t.Errorf("%s %s: the demo app did not answer: %v", c.method, c.path, errs[i])
		case r.Error == "":
			t.Errorf("%s %s: the app got status %d (outcome %q) from a sidecar killed mid-request; want an error", c.method, c.path, r.Status, r.outcome())
		}
		arr := s.arrivals(t, ids[i])
		if len(arr) != 1 {
			t.Errorf("%s %s (request %s): %d arrivals at the upstream, want exactly 1\n%s", c.method, c.path, ids[i], len(arr), report{Arrivals: arr}.timeline())
		}
		t.Logf("%s %s: the app saw %q; the upstream saw %d arrival(s)", c.method, c.path, r.Error, len(arr))
	}
	after := s.liveAppPod(t)
	restarts := func(p corev1.Pod) map[string]int32 {
		m := map[string]int32{}
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			m[st.Name] = st.RestartCount
		}
		return m
	}
	rb, ra := restarts(before), restarts(after)
	if after.UID != before.UID || ra[sidecarName] != rb[sidecarName]+1 || ra["demo-app"] != rb["demo-app"] {
		t.Errorf("restart counts %v → %v (pod %s → %s); want the sidecar restarted once, the app not, the same pod", rb, ra, before.UID, after.UID)
	}
	t.Logf("sidecar killed: restarted by the kubelet, a call succeeded again %s after the kill", back.Round(100*time.Millisecond))
}

// liveAppPod is the app pod as the API server has it now.
func (s *suite) liveAppPod(t *testing.T) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&s.appPod), &p); err != nil {
		t.Fatalf("the app pod: %v", err)
	}
	return p
}

// arrivals are the flaky upstream's recorded arrivals of request id.
func (s *suite) arrivals(t *testing.T, id string) []wire.Arrival {
	t.Helper()
	return s.arrivalsWhere(t, "id", id)
}

// arrivalsWhere reads the flaky upstream's recorded arrivals whose key (id or
// path) is value, through the API server's service proxy.
func (s *suite) arrivalsWhere(t *testing.T, key, value string) []wire.Arrival {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s.cs.CoreV1().Services(s.ns).ProxyGet("http", "flaky-upstream", "80", "arrivals", map[string]string{key: value}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /arrivals?%s=%s: %v (%s)", key, value, err, b)
	}
	var arr []wire.Arrival
	if err := json.Unmarshal(b, &arr); err != nil {
		t.Fatalf("GET /arrivals?%s=%s: %q: %v", key, value, b, err)
	}
	return arr
}

// eventuallyDirect is eventually at a 20 ms pace: it times how soon the pod
// noticed, read from the pod itself.
func (s *suite) eventuallyDirect(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	polltest.UntilEvery(t, timeout, 20*time.Millisecond, explained(what, cond))
}
