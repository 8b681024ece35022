package main_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ---- quota-aware pacing (docs/pacing.md) ----

// localHeld checks a response the sidecar made up for a held upstream and
// returns its Not-Before.
func localHeld(t *testing.T, r result) time.Time {
	t.Helper()
	assertOutcome(t, r, 429, "deferred", "0")
	nb, err := http.ParseTime(r.header.Get("X-Retry-Not-Before"))
	if err != nil {
		t.Fatalf("X-Retry-Not-Before %q: %v", r.header.Get("X-Retry-Not-Before"), err)
	}
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q; want whole seconds >= 1", r.header.Get("Retry-After"))
	}
	return nb
}

// An upstream that announces remaining 0 / reset 3s receives no request during
// the next 3s. With a 2s deadline and a 1s perTryTimeout (1s to wait, the
// reserve of one attempt kept), requests more than 1s before the reset are
// answered locally at once with 429 and Not-Before; a request closer to it
// waits and goes out at the reset, with a whole second left for the upstream
// to answer even on a loaded machine. The hold
// is logged when it starts and ends and shows in the metrics.
func TestPacingRateLimitHeadersHoldTheUpstream(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(200, "RateLimit", `"default";r=0;t=3`, "RateLimit-Policy", `"default";q=10;w=60`), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("deadline: 2s", "perTryTimeout: 1s", "pacing: {rateLimitHeaders: true}")...))
	assertOutcome(t, s.get(up.url("/first")), 200, "success", "1")
	t0 := up.got()[0].at

	answered := 0
	var notBefore time.Time
	for time.Since(t0) < 900*time.Millisecond {
		r := s.get(up.url(fmt.Sprintf("/held-%d", answered)))
		nb := localHeld(t, r)
		if r.elapsed > 500*time.Millisecond {
			t.Fatalf("a held request was answered after %v; want at once", r.elapsed)
		}
		if nb.Before(t0.Add(3*time.Second)) || nb.After(t0.Add(5*time.Second)) {
			t.Fatalf("X-Retry-Not-Before %v; want the reset t0+3s rounded up to the second (t0 %v)", nb, t0)
		}
		notBefore = nb
		answered++
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(up.got()); n != 1 || answered < 2 {
		t.Fatalf("the held upstream received %d requests, %d answered locally; want 1 and at least 2", n, answered)
	}
	s.waitMetric(`retry_sidecar_hold_end_seconds{upstream="up"}`, float64(notBefore.Unix()))
	s.waitMetric(`retry_sidecar_held_requests_total{result="answered",upstream="up"}`, float64(answered))

	time.Sleep(time.Until(t0.Add(2200 * time.Millisecond)))
	r := s.get(up.url("/waits"))
	assertOutcome(t, r, 200, "success", "1")
	got := up.got()
	if len(got) != 2 || got[1].path != "/waits" || got[1].at.Before(t0.Add(3*time.Second)) {
		t.Fatalf("arrivals %d, last %q at t0+%v; want /waits no earlier than t0+3s", len(got), got[len(got)-1].path, got[len(got)-1].at.Sub(t0))
	}
	s.waitMetric(`retry_sidecar_held_requests_total{result="waited",upstream="up"}`, 1)
	s.waitMetric(`retry_sidecar_hold_end_seconds{upstream="up"}`, 0)
	assertOutcome(t, s.get(up.url("/after")), 200, "success", "1")
	logs := s.logs.String()
	for _, want := range []string{`"msg":"upstream hold starts"`, `"msg":"upstream hold ends"`, `"reason":"rate-limit"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if n := strings.Count(logs, `"msg":"upstream hold starts"`); n != 1 {
		t.Errorf("%d hold-start lines, want 1", n)
	}
	if strings.Contains(logs, `r=0;t=3`) || strings.Contains(logs, "q=10;w=60") {
		t.Error("a rate-limit header value reached the log")
	}
}

// Requests whose deadline reaches past the reset wait for it instead of being
// answered, and then all go out.
func TestPacingWaitingRequestsGoOutAtTheReset(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, sequence(status(200, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "2"), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("deadline: 10s", "pacing: {rateLimitHeaders: true}")...))
	assertOutcome(t, s.get(up.url("/first")), 200, "success", "1")
	t0 := up.got()[0].at
	var waiting []<-chan result
	for i := range 4 {
		waiting = append(waiting, s.goGet(up.url(fmt.Sprintf("/w%d", i))))
		time.Sleep(50 * time.Millisecond)
	}
	for i, ch := range waiting {
		r := <-ch
		assertOutcome(t, r, 200, "success", "1")
		if r.elapsed > 5*time.Second {
			t.Errorf("waiting request %d took %v", i, r.elapsed)
		}
	}
	got := up.got()
	if len(got) != 5 {
		t.Fatalf("upstream got %d requests, want 5", len(got))
	}
	for _, a := range got[1:] {
		if a.at.Before(t0.Add(2 * time.Second)) {
			t.Errorf("%s arrived at t0+%v, before the reset at t0+2s", a.path, a.at.Sub(t0))
		}
	}
	s.waitMetric(`retry_sidecar_held_requests_total{result="waited",upstream="up"}`, 4)
}

// With holdOnDeferral, one Retry-After: 3600 answer (beyond maxWait: deferred)
// stops all traffic to that upstream.
func TestPacingHoldOnDeferralStopsAllTraffic(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(429, "Retry-After", "3600"))
	policy := policyFile(t, up.host(), fields("pacing: {holdOnDeferral: true}")...)
	s := startSidecar(t, "--policy-file="+policy)
	before := time.Now()
	first := s.get(up.url("/quota"))
	assertOutcome(t, first, 429, "deferred", "1")
	for i := range 5 {
		r := s.get(up.url(fmt.Sprintf("/again-%d", i)))
		nb := localHeld(t, r)
		if lo, hi := before.Add(3599*time.Second), time.Now().Add(3602*time.Second); nb.Before(lo) || nb.After(hi) {
			t.Fatalf("X-Retry-Not-Before %v; want about now+3600s", nb)
		}
		if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 3598 || ra > 3601 {
			t.Fatalf("Retry-After %d; want about 3600", ra)
		}
	}
	if n := len(up.got()); n != 1 {
		t.Fatalf("the upstream received %d requests after its 3600s deferral, want 1", n)
	}
	s.waitMetric(`retry_sidecar_held_requests_total{result="answered",upstream="up"}`, 5)
	if !strings.Contains(s.logs.String(), `"reason":"deferral"`) {
		t.Error("no hold-start log line with reason deferral")
	}

	// A reload keeps the hold, like the outage budget.
	writeFile(t, policy, policyYAML("test", "up", up.host(), fields("maxAttempts: 2", "pacing: {holdOnDeferral: true}")...))
	s.waitMetric("retry_sidecar_config_reloads_total", 2)
	localHeld(t, s.get(up.url("/after-reload")))
	if n := len(up.got()); n != 1 {
		t.Fatalf("after a reload the upstream received %d requests, want still 1", n)
	}
}
