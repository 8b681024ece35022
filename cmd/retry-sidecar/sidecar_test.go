package main_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// Fast retries unless a test says otherwise.
var fast = []string{"backoff: {base: 10ms, max: 20ms, jitter: None}", "retryAfter: {maxWait: 5s, spread: 1ms}"}

func fields(extra ...string) []string { return append(append([]string(nil), fast...), extra...) }

// ---- one test per outcome (docs/retry-semantics.md#outcomes) ----

func TestOutcomeSuccess(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(200))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	r := s.get(up.url("/hello"))
	assertOutcome(t, r, 200, "success", "1")
	got := up.got()
	if len(got) != 1 || got[0].header.Get("X-Retry-Attempt") != "1" {
		t.Fatalf("arrivals %d, X-Retry-Attempt %q; want 1, \"1\"", len(got), got[0].header.Get("X-Retry-Attempt"))
	}
	for _, h := range []string{"Via", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v := got[0].header.Get(h); v != "" {
			t.Errorf("upstream got invented header %s: %q", h, v)
		}
	}
}

func TestOutcomeNotRetryable(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(404))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	assertOutcome(t, s.get(up.url("/missing")), 404, "not-retryable", "1")
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d attempts, want 1", n)
	}
}

func TestOutcomeNotReplayablePOSTWithoutKeyIsSentOnce(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("idempotencyKey: {header: Idempotency-Key}")...))
	req, _ := http.NewRequest(http.MethodPost, up.url("/orders"), strings.NewReader(`{"item":1}`))
	assertOutcome(t, s.do(req), 503, "not-replayable", "1")
	time.Sleep(200 * time.Millisecond)
	if n := len(up.got()); n != 1 {
		t.Fatalf("a POST without idempotency key reached the upstream %d times, want 1", n)
	}
}

func TestOutcomeExhausted(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("maxAttempts: 3")...))
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "3")
	got := up.got()
	if len(got) != 3 {
		t.Fatalf("upstream got %d attempts, want 3", len(got))
	}
	for i, a := range got {
		if want := string(rune('1' + i)); a.header.Get("X-Retry-Attempt") != want {
			t.Errorf("attempt %d carried X-Retry-Attempt %q, want %q", i+1, a.header.Get("X-Retry-Attempt"), want)
		}
	}
}

func TestOutcomeDeferredWhenHintExceedsMaxWait(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503, "Retry-After", "120"))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		"backoff: {base: 10ms, max: 20ms}", "retryAfter: {maxWait: 1s, spread: 1ms}"))
	before := time.Now()
	r := s.get(up.url("/slow-down"))
	assertOutcome(t, r, 503, "deferred", "1")
	if r.elapsed > time.Second {
		t.Errorf("deferred after %v; want at once", r.elapsed)
	}
	if r.header.Get("Retry-After") != "120" || r.body != "Service Unavailable" {
		t.Errorf("Retry-After %q, body %q; want the upstream's own \"120\" and body", r.header.Get("Retry-After"), r.body)
	}
	nb, err := http.ParseTime(r.header.Get("X-Retry-Not-Before"))
	if err != nil {
		t.Fatalf("X-Retry-Not-Before %q: %v", r.header.Get("X-Retry-Not-Before"), err)
	}
	if lo, hi := before.Add(119*time.Second), time.Now().Add(121*time.Second); nb.Before(lo) || nb.After(hi) {
		t.Errorf("X-Retry-Not-Before %v, want about now+120s", nb)
	}
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d attempts, want 1", n)
	}
}

func TestOutcomeDeferredWhenHintIsBeyondTheDeadline(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(429, "Retry-After", "5"))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		"deadline: 2s", "backoff: {base: 10ms, max: 20ms}", "retryAfter: {maxWait: 30s, spread: 1ms}"))
	r := s.get(up.url("/"))
	assertOutcome(t, r, 429, "deferred", "1")
	if r.elapsed > time.Second || r.header.Get("Retry-After") != "5" || r.header.Get("X-Retry-Not-Before") == "" {
		t.Fatalf("after %v: Retry-After %q, X-Retry-Not-Before %q; want at once, \"5\", set",
			r.elapsed, r.header.Get("Retry-After"), r.header.Get("X-Retry-Not-Before"))
	}
}

func TestOutcomeDeadlineExceeded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("deadline: 300ms")...))
	r := s.get(up.url("/"))
	assertOutcome(t, r, http.StatusGatewayTimeout, "deadline-exceeded", "1")
	if r.elapsed > 2*time.Second {
		t.Fatalf("answered after %v; the deadline is 300ms", r.elapsed)
	}
}

func TestOutcomeBudgetExhausted(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		fields("maxAttempts: 3", "budget: {retryPercent: 0, minRetriesPerSecond: 0}")...))
	assertOutcome(t, s.get(up.url("/")), 503, "budget-exhausted", "1")
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d attempts, want 1", n)
	}
	if v := s.metric(`retry_sidecar_budget_exhausted_total{upstream="up"}`); v != 1 {
		t.Fatalf("budget_exhausted_total = %v, want 1", v)
	}
}

func TestOutcomeShedUnderFullQueueAnswers503Fast(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-release
		}
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		fields("concurrency: {maxInFlight: 1, maxQueued: 0, queueTimeout: 3s}")...))
	first := s.goGet(up.url("/held"))
	up.waitForArrivals(t, 1)
	r := s.get(up.url("/second"))
	close(release)
	assertOutcome(t, r, 503, "shed", "0")
	if r.elapsed > time.Second || r.header.Get("Retry-After") == "" {
		t.Fatalf("shed after %v with Retry-After %q; want well before the 3s queue timeout, with a Retry-After", r.elapsed, r.header.Get("Retry-After"))
	}
	assertOutcome(t, <-first, 200, "success", "1")
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d requests, want 1 (the shed one never leaves)", n)
	}
	s.waitMetric(`retry_sidecar_shed_total{upstream="up"}`, 1)
}

func TestOutcomeCanceledDuringWaitSendsNothingMore(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503, "Retry-After", "1"), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	ctx, cancel := withCancel(300 * time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.url("/"), nil)
	if _, err := s.client().Do(req); err == nil {
		t.Fatal("request succeeded; want the client's own cancellation")
	}
	s.waitMetric(`retry_sidecar_requests_total{outcome="canceled",upstream="up"}`, 1)
	time.Sleep(1200 * time.Millisecond) // past the 1s Retry-After
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d attempts after the client left, want 1", n)
	}
	if !strings.Contains(s.logs.String(), `"outcome":"canceled"`) {
		t.Fatal("no canceled outcome in the log")
	}
}

func TestOutcomeUpstreamError(t *testing.T) {
	t.Parallel()
	dead := freePort(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, dead, fields("retryOn: {statusCodes: [503], connectFailure: false}")...))
	assertOutcome(t, s.get("http://"+dead+"/"), http.StatusBadGateway, "upstream-error", "1")
}

// ---- Retry-After ----

func TestRetryAfterSecondsIsALowerBound(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503, "Retry-After", "1"), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	assertOutcome(t, s.get(up.url("/")), 200, "success", "2")
	got := up.got()
	if gap := got[1].at.Sub(got[0].at); gap < time.Second {
		t.Fatalf("second attempt %v after the first; Retry-After: 1 asks for at least 1s", gap)
	}
}

func TestRetryAfterHTTPDateIsALowerBound(t *testing.T) {
	t.Parallel()
	formats := map[string]string{
		"IMF-fixdate": http.TimeFormat,
		"RFC 850":     "Monday, 02-Jan-06 15:04:05 GMT",
		"asctime":     time.ANSIC,
	}
	for name, layout := range formats {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var notBefore time.Time
			up := newUpstream(t, sequence(func(_ int, w http.ResponseWriter, _ *http.Request) {
				// 0.5..1.5s ahead once the format drops the fraction of a second
				notBefore = time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Second)
				w.Header().Set("Retry-After", notBefore.Format(layout))
				w.WriteHeader(503)
			}, status(200)))
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
			assertOutcome(t, s.get(up.url("/")), 200, "success", "2")
			got := up.got()
			if got[1].at.Before(notBefore) {
				t.Fatalf("second attempt at %v, before the server's Retry-After date %v", got[1].at, notBefore)
			}
		})
	}
}

// ---- replay ----

func TestPOSTWithIdempotencyKeyIsReplayedWithSameKeyAndBody(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503), status(201)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("idempotencyKey: {header: Idempotency-Key}")...))
	req, _ := http.NewRequest(http.MethodPost, up.url("/charges"), strings.NewReader(`{"amount":42}`))
	req.Header.Set("Idempotency-Key", "key-7f3a")
	assertOutcome(t, s.do(req), 201, "success", "2")
	got := up.got()
	if len(got) != 2 {
		t.Fatalf("upstream got %d attempts, want 2", len(got))
	}
	for i, a := range got {
		if a.header.Get("Idempotency-Key") != "key-7f3a" || a.body != `{"amount":42}` {
			t.Errorf("attempt %d: key %q body %q; want the caller's own key and body", i+1, a.header.Get("Idempotency-Key"), a.body)
		}
	}
}

func TestRequestFromAnotherRetryingLayerIsNotRetried(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	req, _ := http.NewRequest(http.MethodGet, up.url("/"), nil)
	req.Header.Set("X-Retry-Attempt", "2")
	assertOutcome(t, s.do(req), 503, "exhausted", "1")
	if n := len(up.got()); n != 1 {
		t.Fatalf("upstream got %d attempts, want 1", n)
	}
}

// ---- outage budget ----

func TestBudgetCapsAmplificationInFullOutage(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		"maxAttempts: 4", "backoff: {base: 1ms, max: 2ms, jitter: None}", "budget: {retryPercent: 20, minRetriesPerSecond: 0}"))
	const logical = 100
	c := s.client()
	for i := 0; i < logical; i++ {
		resp, err := c.Get(up.url("/"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	sent := len(up.got())
	if sent > logical*125/100 || sent < logical {
		t.Fatalf("%d logical requests reached the upstream as %d attempts; want at most 1.25x (without a budget: %d)", logical, sent, logical*4)
	}
	t.Logf("amplification %.2fx", float64(sent)/logical)
}

// ---- routing and headers ----

func TestUnmatchedHostPassesThroughWithOneAttempt(t *testing.T) {
	t.Parallel()
	covered := newUpstream(t, status(200))
	other := newUpstream(t, status(503))
	s := startSidecar(t, "--policy-file="+policyFile(t, covered.host(), fields()...))
	r := s.get(other.url("/x"))
	if r.status != 503 || r.header.Get("X-Retry-Outcome") != "" {
		t.Fatalf("got %d with X-Retry-Outcome %q; want the upstream's 503 untouched", r.status, r.header.Get("X-Retry-Outcome"))
	}
	got := other.got()
	if len(got) != 1 || got[0].header.Get("X-Retry-Attempt") != "" {
		t.Fatalf("pass-through made %d attempts (X-Retry-Attempt %q); want 1 with no header added", len(got), got[0].header.Get("X-Retry-Attempt"))
	}
	s.waitMetric(`retry_sidecar_passthrough_requests_total{result="ok"}`, 1)
}

func TestOriginFormIsRoutedByHost(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	resp := rawRequest(t, s.proxy, "GET /origin HTTP/1.1\r\nHost: "+up.host()+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || resp.Header.Get("X-Retry-Attempts") != "2" {
		t.Fatalf("got %d, X-Retry-Attempts %q; want 200 after 2 attempts under the Host's policy", resp.StatusCode, resp.Header.Get("X-Retry-Attempts"))
	}
	if got := up.got(); got[0].path != "/origin" {
		t.Fatalf("upstream path %q", got[0].path)
	}
}

func TestHopByHopHeadersAreNotForwarded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "1")
		h.Set("Proxy-Authenticate", "Basic realm=up")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("X-End-To-End", "kept")
		w.WriteHeader(200)
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	resp := rawRequest(t, s.proxy, "GET http://"+up.host()+"/h HTTP/1.1\r\nHost: "+up.host()+
		"\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nTE: trailers\r\nUpgrade: websocket\r\nX-End-To-End: kept\r\n\r\n")
	got := up.got()
	if len(got) != 1 {
		t.Fatalf("upstream got %d requests", len(got))
	}
	for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Upgrade"} {
		if v := got[0].header.Get(h); v != "" {
			t.Errorf("upstream got hop-by-hop %s: %q", h, v)
		}
	}
	if got[0].header.Get("X-End-To-End") != "kept" {
		t.Error("end-to-end request header lost")
	}
	for _, h := range []string{"X-Resp-Hop", "Proxy-Authenticate", "Keep-Alive"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("client got hop-by-hop %s: %q", h, v)
		}
	}
	if resp.Header.Get("X-End-To-End") != "kept" {
		t.Error("end-to-end response header lost")
	}
}

func TestCONNECTIsTunnelledUnchanged(t *testing.T) {
	t.Parallel()
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Retry-Attempt") != "" {
			w.WriteHeader(500) // the proxy must not see inside the tunnel
		}
		io.WriteString(w, "secure")
	}))
	defer tlsUp.Close()
	s := startSidecar(t, "--policy-file="+policyFile(t, tlsUp.Listener.Addr().String(), fields()...))
	base := tlsUp.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: s.proxy}), TLSClientConfig: base}}
	resp, err := c.Get(tlsUp.URL + "/tls")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "secure" || resp.Header.Get("X-Retry-Outcome") != "" {
		t.Fatalf("got %d %q (outcome %q)", resp.StatusCode, b, resp.Header.Get("X-Retry-Outcome"))
	}
	c.CloseIdleConnections()
	s.waitMetric("retry_sidecar_connect_tunnels_total", 1)
	s.waitMetric("retry_sidecar_connect_tunnels_active", 0)
}

// ---- configuration ----

func TestHotReloadAppliesNewPolicyAndRefusesBrokenOne(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	path := policyFile(t, up.host(), fields("maxAttempts: 1")...)
	s := startSidecar(t, "--policy-file="+path)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "1")
	_, ready := s.adminGet("/readyz")

	writeFile(t, path, policyYAML("test", "up", up.host(), fields("maxAttempts: 3")...))
	s.waitMetric("retry_sidecar_config_reloads_total", 2)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "3")
	_, readyAfter := s.adminGet("/readyz")
	if readyAfter == ready {
		t.Fatalf("readyz reports the same hash after a reload: %q", readyAfter)
	}

	writeFile(t, path, policyYAML("test", "up", up.host(), fields("maxAttempts: 42")...))
	s.waitMetric("retry_sidecar_config_reload_errors_total", 1)
	if code, body := s.adminGet("/readyz"); code != 200 || body != readyAfter {
		t.Fatalf("readyz after a refused reload: %d %q; want 200 %q", code, body, readyAfter)
	}
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "3") // the old config stays
	if !strings.Contains(s.logs.String(), "spec.upstreams[0].maxAttempts") {
		t.Error("the refusal's reason is not in the log")
	}
}

// "retry-sidecar help" and "--help" print the same usage and succeed
// (the usage itself: TestUsageListsEveryFlagSubcommandAndEnvironmentVariable).
func TestHelpSubcommandAndFlagPrintTheSameUsage(t *testing.T) {
	t.Parallel()
	help, err := exec.Command(sidecarBin, "help").Output()
	if err != nil {
		t.Fatalf("retry-sidecar help: %v", err)
	}
	flagHelp, err := exec.Command(sidecarBin, "--help").Output()
	if err != nil {
		t.Fatalf("retry-sidecar --help: %v", err)
	}
	if string(help) != string(flagHelp) || !strings.HasPrefix(string(help), "retry-sidecar: the forward HTTP proxy") {
		t.Errorf("help:\n%s\n--help:\n%s\nwant the same usage", help, flagHelp)
	}
}

// A policy file the user named must load at start: a typo stops the sidecar
// with the file and the problem, instead of a proxy passing traffic without
// retries. (A broken edit later keeps the last good policy:
// TestHotReloadAppliesNewPolicyAndRefusesBrokenOne.)
func TestPolicyFileThatCannotLoadAtStartStopsTheSidecar(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		content string // "" : the file does not exist
		want    string // in stderr, after the file's path
	}{
		"a file that does not exist": {
			want: "no such file or directory",
		},
		"a file that is not YAML": {
			content: "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: broken\n",
			want:    "document 0: error converting YAML to JSON",
		},
		"a policy with an invalid value": {
			content: policyYAML("test", "up", "127.0.0.1:1", "maxAttempts: 42"),
			want:    "spec.upstreams[0].maxAttempts: Invalid value: 42",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "my-policy.yaml")
			if tc.content != "" {
				writeFile(t, path, tc.content)
			}
			got := startError(t, nil, "--policy-file="+path)
			if !strings.HasPrefix(got, "--policy-file") || !strings.Contains(got, path) || !strings.Contains(got, tc.want) {
				t.Errorf("error %q; want the file %s and %q", got, path, tc.want)
			}
		})
	}
}

// startError runs the sidecar with env (KEY=value) and args, expects it to
// exit 1 within 10 s, and returns the error of its last log line, a JSON
// {"level":"ERROR","msg":"retry-sidecar cannot start","error":…}.
func startError(t *testing.T, env []string, args ...string) string {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(sidecarBin, append([]string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--stats-listen="}, args...)...)
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want exit status 1\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var last struct{ Level, Msg, Error string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Level != "ERROR" || last.Msg != "retry-sidecar cannot start" {
		t.Fatalf("last stderr line %q (%v); want the JSON line \"retry-sidecar cannot start\"", lines[len(lines)-1], err)
	}
	return last.Error
}

// An OTLP endpoint the exporter cannot use stops the sidecar
// (docs/observability.md#tracing), and the first log lines say whether
// tracing is on and where spans go.
func TestTracingEndpointIsCheckedAndLoggedAtStart(t *testing.T) {
	t.Parallel()
	got := startError(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318"})
	if want := `OTEL_EXPORTER_OTLP_ENDPOINT: "127.0.0.1:4318" is not a URL with scheme http or https: want e.g. http://127.0.0.1:4318`; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
	for env, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=":                                      `"msg":"tracing","enabled":false,"reason":"OTEL_EXPORTER_OTLP_ENDPOINT is not set"`,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://u:s3cret@127.0.0.1:1/?k=s3cret": `"msg":"tracing","enabled":true,"endpoint":"http://127.0.0.1:1/","protocol":"http/protobuf"`,
	} {
		s := startSidecarEnv(t, []string{env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="})
		if logs := s.logs.String(); !strings.Contains(logs, want) || strings.Contains(logs, "s3cret") {
			t.Errorf("%s: log\n%s\nwant a line with %s and no credentials", env, logs, want)
		}
	}
}

// Without --policy-file (in a pod) the sidecar starts with a broken
// policies.json, not ready until the manager renders a valid one.
func TestNotReadyUntilAValidConfigIsLoaded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503), status(200)))
	dir := t.TempDir()
	kubeletWrite(t, dir, map[string]string{"policies.json": "{not json"})
	s := startSidecar(t, "--config-dir="+dir)
	if code, _ := s.adminGet("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d with only a broken policies.json; want 503", code)
	}
	if code, _ := s.adminGet("/healthz"); code != 200 {
		t.Fatalf("healthz %d, want 200", code)
	}
	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, up.host(), 3, 1)})
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := s.adminGet("/readyz"); code != 200; code, _ = s.adminGet("/readyz") {
		if time.Now().After(deadline) {
			t.Fatal("not ready 10s after a valid policy was written")
		}
		time.Sleep(20 * time.Millisecond)
	}
	assertOutcome(t, s.get(up.url("/")), 200, "success", "2")
}

func TestConfigDirFollowsKubeletSwapsAndPodLabels(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	doc := func(attemptsA, attemptsB int) string {
		y := policyYAML("a", "up-a", up.host(), fields("maxAttempts: "+itoa(attemptsA))...) +
			"  podSelector: {matchLabels: {app: a}}\n---\n" +
			policyYAML("b", "up-b", up.host(), fields("maxAttempts: "+itoa(attemptsB))...) +
			"  podSelector: {matchLabels: {app: b}}\n"
		return policysettest.Rendered(t, y, 0)
	}
	cmDir, labelsDir := t.TempDir(), t.TempDir()
	kubeletWrite(t, cmDir, map[string]string{"policies.json": doc(2, 4)})
	kubeletWrite(t, labelsDir, map[string]string{"labels": "app=\"a\"\npod-template-hash=\"5d9f\"\n"})
	s := startSidecar(t, "--config-dir="+cmDir, "--pod-labels="+filepath.Join(labelsDir, "labels"))
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "2")

	kubeletWrite(t, cmDir, map[string]string{"policies.json": doc(3, 4)})
	s.waitMetric("retry_sidecar_config_reloads_total", 2)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "3")

	kubeletWrite(t, labelsDir, map[string]string{"labels": "app=\"b\"\n"})
	s.waitMetric("retry_sidecar_config_reloads_total", 3)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "4")
	if v := s.metric("retry_sidecar_config_upstreams"); v != 1 {
		t.Fatalf("config_upstreams = %v, want 1 (only policy b selects app=b)", v)
	}
}

func TestEmptyConfigDirIsReadyAndPassesThrough(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	s := startSidecar(t, "--config-dir="+t.TempDir()) // the ConfigMap volume is optional
	if code, _ := s.adminGet("/readyz"); code != 200 {
		t.Fatalf("readyz %d without a ConfigMap yet; want 200", code)
	}
	if r := s.get(up.url("/")); r.status != 503 || r.header.Get("X-Retry-Outcome") != "" || len(up.got()) != 1 {
		t.Fatalf("got %d outcome %q after %d attempts; want a plain pass-through", r.status, r.header.Get("X-Retry-Outcome"), len(up.got()))
	}
}

// ---- observability ----

func TestSecretsNeverReachTheLogs(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(503, "Retry-After", "bogus s3cr3t-retry-after"), status(200)))
	dead := freePort(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, policyYAML("test", "up", up.host(), fields("replayableMethods: [GET, PUT]")...)+
		"---\n"+policyYAML("dead", "dead", dead, fields()...))
	s := startSidecar(t, "--policy-file="+path, "--log-level=debug")
	send := func(target string) {
		req, _ := http.NewRequest(http.MethodPut, target, strings.NewReader("s3cr3t-body"))
		req.Header.Set("Authorization", "Bearer s3cr3t-authorization")
		req.Header.Set("Cookie", "session=s3cr3t-cookie")
		req.Header.Set("X-Api-Key", "s3cr3t-api-key")
		req.Header.Set("X-Request-Id", "req-4711")
		s.do(req)
	}
	send(up.url("/pay?token=s3cr3t-query"))
	send("http://" + dead + "/down?token=s3cr3t-query-2")
	other := newUpstream(t, status(200))
	send(other.url("/passthrough?token=s3cr3t-query-3"))

	s.waitMetric(`retry_sidecar_requests_total{outcome="success",upstream="up"}`, 1)
	logs := s.logs.String()
	if strings.Contains(logs, "s3cr3t") || strings.Contains(logs, "token=") {
		t.Fatalf("a secret reached the log:\n%s", logs)
	}
	for _, want := range []string{`"request_id":"req-4711"`, `"path":"/pay"`, `"retry_after":"malformed"`, `"outcome":"success"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
}

func TestMetricsCountAttemptsDelaysParseFailuresAndSkew(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(
		status(503, "Retry-After", "soon"),
		func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Date", time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat))
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
		},
		func(_ int, w http.ResponseWriter, _ *http.Request) {
			// Dated without a Retry-After: the skew is still observed (R1).
			w.Header().Set("Date", time.Now().Add(-2*time.Minute).UTC().Format(http.TimeFormat))
			w.WriteHeader(200)
		}))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	assertOutcome(t, s.get(up.url("/")), 200, "success", "3")
	for series, want := range map[string]float64{
		`retry_sidecar_attempts_total{status="503",upstream="up"}`:      2,
		`retry_sidecar_attempts_total{status="200",upstream="up"}`:      1,
		`retry_sidecar_retry_delay_seconds_count{upstream="up"}`:        2,
		`retry_sidecar_requests_total{outcome="success",upstream="up"}`: 1,
	} {
		s.waitMetric(series, want)
	}
	_, body := s.adminGet("/metrics")
	if !strings.Contains(body, `retry_sidecar_retry_after_parse_failures_total{reason=`) {
		t.Error("no Retry-After parse failure counted")
	}
	if skew := s.metric(`retry_sidecar_clock_skew_seconds{upstream="up"}`); skew < 115 || skew > 125 {
		t.Errorf("clock skew %v s, want about 120 (from the last, dated 200 without Retry-After)", skew)
	}
	if !strings.Contains(body, `retry_sidecar_config_info{hash="sha256:`) {
		t.Error("no config_info with the content hash")
	}
}

// ---- shutdown ----

func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(700 * time.Millisecond)
		io.WriteString(w, "finished")
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	done := s.goGet(up.url("/slow"))
	up.waitForArrivals(t, 1)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", s.proxy, time.Second); err == nil {
		c.Close()
		t.Error("still accepting connections after SIGTERM")
	}
	r := <-done
	if r.status != 200 || r.body != "finished" {
		t.Fatalf("in-flight request got %d %q; want it to finish", r.status, r.body)
	}
	select {
	case <-s.exited:
		var ee interface{ ExitCode() int }
		if s.err != nil && (!errors.As(s.err, &ee) || ee.ExitCode() != 0) {
			t.Fatalf("exit: %v", s.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit after draining")
	}
	if !strings.Contains(s.logs.String(), `"clean":true`) {
		t.Error("drain not reported clean")
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

// ---- the stats port (what Prometheus scrapes on the pod IP) ----

func TestStatsPortServesMetricsAndConfigOnEveryInterface(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-release
		}
	})
	// The manager stamps a revision on the document; /config echoes it.
	withRevision := policysettest.Rendered(t, policyYAML("p", "up", up.host(),
		fields("concurrency: {maxInFlight: 1, maxQueued: 1, queueTimeout: 5s}")...), 7)
	dir := t.TempDir()
	kubeletWrite(t, dir, map[string]string{"policies.json": withRevision})
	s := startSidecar(t, "--config-dir="+dir, "--stats-listen=:0")

	if host, _, _ := net.SplitHostPort(s.stats); host != "::" && host != "0.0.0.0" {
		t.Errorf("stats bound to %q, want every interface (the pod IP)", s.stats)
	}
	code, body := s.statsGet("/config")
	var info policyset.ConfigStatus
	if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil {
		t.Fatalf("GET /config: %d %q (%v)", code, body, err)
	}
	sum := sha256.Sum256([]byte(withRevision))
	if info.Revision != 7 || info.Hash != policyset.Hash([]byte(withRevision)) ||
		info.SHA256 != hex.EncodeToString(sum[:]) || !slices.Equal(info.Upstreams, []string{"up"}) || info.Source != "file" {
		t.Errorf("GET /config = %s\nwant revision 7, hash %s, sha256 %x, upstreams [up], source file",
			body, policyset.Hash([]byte(withRevision)), sum)
	}

	// One attempt held in flight, one request queued behind it.
	first := s.goGet(up.url("/held"))
	up.waitForArrivals(t, 1)
	second := s.goGet(up.url("/queued"))
	polltest.UntilTrue(t, 10*time.Second, func() bool { return s.statsMetric(`retry_sidecar_queued_requests{upstream="up"}`) == 1 })
	if v := s.statsMetric(`retry_sidecar_in_flight_attempts{upstream="up"}`); v != 1 {
		t.Errorf("in_flight_attempts = %v with one held, want 1", v)
	}
	close(release)
	assertOutcome(t, <-first, 200, "success", "1")
	assertOutcome(t, <-second, 200, "success", "1")
	polltest.UntilTrue(t, 10*time.Second, func() bool {
		return s.statsMetric(`retry_sidecar_in_flight_attempts{upstream="up"}`) == 0 &&
			s.statsMetric(`retry_sidecar_queued_requests{upstream="up"}`) == 0
	})
	if v := s.statsMetric(`retry_sidecar_request_duration_seconds_count{outcome="success",upstream="up"}`); v != 2 {
		t.Errorf("request_duration_seconds_count{success} = %v, want 2", v)
	}
	// The queued request waited for the held one: it took longer than 0.
	if v := s.statsMetric(`retry_sidecar_request_duration_seconds_bucket{outcome="success",upstream="up",le="0.001"}`); v > 1 {
		t.Errorf("%v requests under 1ms, want at most 1 (the queued one waited)", v)
	}

	// Health, readiness and pprof stay on loopback.
	if code, _ := s.statsGet("/healthz"); code != 404 {
		t.Errorf("stats /healthz = %d, want 404", code)
	}
}
