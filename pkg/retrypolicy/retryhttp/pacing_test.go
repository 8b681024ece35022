package retryhttp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/headertest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// lockedEvents records events from any goroutine (holds end on the timer).
type lockedEvents struct {
	mu     sync.Mutex
	events []Event
}

func (l *lockedEvents) Observe(e Event) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *lockedEvents) kinds(k EventKind) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func pacedHarness(t *testing.T, pacing limits.PacingConfig, deadline time.Duration, steps ...step) (*harness, *lockedEvents) {
	p := compile(t, func(c *retrypolicy.Config) { c.Pacing = pacing; c.Deadline = deadline })
	h := newHarness(t, p, steps...)
	ev := &lockedEvents{}
	h.tr.Observer = ev
	return h, ev
}

func (h *harness) sentCount() int {
	h.inner.mu.Lock()
	defer h.inner.mu.Unlock()
	return len(h.inner.sent)
}

// wantLocal429 checks a response answered locally for a held upstream.
func wantLocal429(t *testing.T, resp *http.Response, err error, retryAfter, notBefore string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"status": resp.Status, "Retry-After": resp.Header.Get("Retry-After"),
		HeaderNotBefore: resp.Header.Get(HeaderNotBefore), HeaderOutcome: resp.Header.Get(HeaderOutcome),
		HeaderAttempts: resp.Header.Get(HeaderAttempts)}
	want := map[string]string{"status": "429 Too Many Requests", "Retry-After": retryAfter, HeaderNotBefore: notBefore,
		HeaderOutcome: "deferred", HeaderAttempts: "0"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	readBody(t, resp)
}

// TestTransportRateLimitHeadersHoldTheUpstream: after a response announcing
// remaining 0 with reset 3s, nothing is sent for 3s: a request whose deadline is
// too short is answered locally with 429 and Not-Before; one whose deadline
// allows waits and goes out at the reset.
func TestTransportRateLimitHeadersHoldTheUpstream(t *testing.T) {
	h, ev := pacedHarness(t, limits.PacingConfig{RateLimitHeaders: true}, 2*time.Second,
		step{status: 200, header: headertest.Of("RateLimit", `"default";r=0;t=3`), body: "last one"},
		step{status: 200, body: "after the reset"})
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil || resp.StatusCode != 200 || readBody(t, resp) != "last one" {
		t.Fatalf("first request: %v, %v", resp, err)
	}
	starts := ev.kinds(EventHoldStart)
	if len(starts) != 1 || !starts[0].NotBefore.Equal(now.Add(3*time.Second)) || starts[0].HoldReason != limits.HoldRateLimit {
		t.Fatalf("hold-start events %+v; want one until now+3s, reason rate-limit", starts)
	}

	// 2s deadline − 100ms reserve < 3s: answered at once, not sent.
	resp, err = h.do(get(context.Background(), "http://payments.shop.svc/"))
	wantLocal429(t, resp, err, "3", "Fri, 01 May 2026 12:00:03 GMT")
	if n := h.sentCount(); n != 1 {
		t.Fatalf("%d transmissions; a held request must not reach the upstream", n)
	}
	if held := ev.kinds(EventHeld); len(held) != 1 || held[0].Outcome != retrypolicy.OutcomeDeferred {
		t.Fatalf("held events %+v; want one answered locally", held)
	}
}

func TestTransportHeldRequestWaitsWhenItsDeadlineAllows(t *testing.T) {
	h, ev := pacedHarness(t, limits.PacingConfig{RateLimitHeaders: true}, 30*time.Second,
		step{status: 200, header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3")},
		step{status: 200, body: "after the reset"})
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	done := make(chan *http.Response, 1)
	go func() {
		r, err := h.tr.RoundTrip(get(context.Background(), "http://payments.shop.svc/"))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	pc := h.tr.Route(nil).Limits().Pacer()
	clocktest.WaitFor(t, "the request to wait in line", func() bool { return pc.Queued() == 1 })
	h.clk.Advance(2999 * time.Millisecond)
	if n := h.sentCount(); n != 1 {
		t.Fatalf("%d transmissions before the reset, want 1", n)
	}
	h.clk.Advance(time.Millisecond)
	resp = <-done
	if resp == nil || resp.StatusCode != 200 || readBody(t, resp) != "after the reset" {
		t.Fatalf("waiting request: %v", resp)
	}
	h.inner.mu.Lock()
	at := h.inner.sent[1].at
	h.inner.mu.Unlock()
	if !at.Equal(now.Add(3 * time.Second)) {
		t.Fatalf("second transmission at %v, want at the reset now+3s", at)
	}
	if ends := ev.kinds(EventHoldEnd); len(ends) != 1 || !ends[0].NotBefore.Equal(now.Add(3*time.Second)) {
		t.Fatalf("hold-end events %+v; want one for now+3s", ends)
	}
	if held := ev.kinds(EventHeld); len(held) != 1 || held[0].Outcome != "" || held[0].Delay != 3*time.Second {
		t.Fatalf("held events %+v; want one that waited 3s", held)
	}
}

// TestTransportNotBeforeIsRoundedUp: a reset that ends mid-second is announced
// as the next whole second, never earlier.
func TestTransportNotBeforeIsRoundedUp(t *testing.T) {
	h, _ := pacedHarness(t, limits.PacingConfig{RateLimitHeaders: true}, 2*time.Second,
		step{status: 200, header: headertest.Of("RateLimit-Remaining", "0", "RateLimit-Reset", "3")})
	h.inner.onSend = func(int) { h.clk.Advance(400 * time.Millisecond) } // received at 12:00:00.4
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	resp, err = h.do(get(context.Background(), "http://payments.shop.svc/"))
	wantLocal429(t, resp, err, "3", "Fri, 01 May 2026 12:00:04 GMT")
}

// TestTransportHoldOnDeferral: a Retry-After beyond maxWait defers the request
// and, with holdOnDeferral, holds every later request until Not-Before.
func TestTransportHoldOnDeferral(t *testing.T) {
	tests := map[string]struct {
		pacing   limits.PacingConfig
		wantSent int
	}{
		"holdOnDeferral on: the second request is answered locally":   {limits.PacingConfig{HoldOnDeferral: true}, 1},
		"holdOnDeferral off: the second request reaches the upstream": {limits.PacingConfig{RateLimitHeaders: true}, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, ev := pacedHarness(t, tc.pacing, 30*time.Second,
				step{status: 429, header: headertest.Of("Retry-After", "3600"), body: "daily quota"},
				step{status: 429, header: headertest.Of("Retry-After", "3600"), body: "daily quota"})
			resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
			if err != nil || resp.Header.Get(HeaderOutcome) != "deferred" {
				t.Fatalf("first request: %v, %v; want deferred", resp, err)
			}
			readBody(t, resp)
			resp, err = h.do(get(context.Background(), "http://payments.shop.svc/"))
			if tc.wantSent == 1 {
				wantLocal429(t, resp, err, "3600", "Fri, 01 May 2026 13:00:00 GMT")
				if s := ev.kinds(EventHoldStart); len(s) != 1 || s[0].HoldReason != limits.HoldDeferral {
					t.Fatalf("hold-start events %+v; want one, reason deferral", s)
				}
			} else if err != nil || resp.Header.Get(HeaderAttempts) != "1" {
				t.Fatalf("second request: %v, %v; want it sent", resp, err)
			}
			if n := h.sentCount(); n != tc.wantSent {
				t.Fatalf("%d transmissions, want %d", n, tc.wantSent)
			}
		})
	}
}

// TestTransportIgnoresRateLimitHeadersWhenOff: pacing is opt-in.
func TestTransportIgnoresRateLimitHeadersWhenOff(t *testing.T) {
	h, ev := pacedHarness(t, limits.PacingConfig{}, 2*time.Second,
		step{status: 200, header: headertest.Of("RateLimit", `"default";r=0;t=3`)}, step{status: 200})
	for range 2 {
		resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v, %v", resp, err)
		}
		readBody(t, resp)
	}
	if n := h.sentCount(); n != 2 || len(ev.kinds(EventHoldStart)) != 0 {
		t.Fatalf("%d transmissions, hold events %v; want 2 and none", n, ev.kinds(EventHoldStart))
	}
}

// TestTransportReportsMalformedRateLimitHeaders: ignored, and named in the
// attempt event (never the value).
func TestTransportReportsMalformedRateLimitHeaders(t *testing.T) {
	h, ev := pacedHarness(t, limits.PacingConfig{RateLimitHeaders: true}, 2*time.Second,
		step{status: 200, header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "soon")}, step{status: 200})
	for range 2 {
		resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v, %v", resp, err)
		}
		readBody(t, resp)
	}
	a := ev.kinds(EventAttempt)
	if len(a) != 2 || a[0].RateLimitMalformed != "X-Ratelimit-Reset" || a[0].RateLimitReason != "not-an-integer" {
		t.Fatalf("attempt events %+v; want the first to name X-Ratelimit-Reset, not-an-integer", a)
	}
}

// TestTransportHeldRequestGivesItsReplayMemoryBack: a buffered body of a
// request answered locally by a hold returns its bytes to the process-wide cap.
func TestTransportHeldRequestGivesItsReplayMemoryBack(t *testing.T) {
	h, _ := pacedHarness(t, limits.PacingConfig{RateLimitHeaders: true}, 2*time.Second,
		step{status: 200, header: headertest.Of("RateLimit", `"default";r=0;t=3`)})
	h.tr.ReplayMemory = NewReplayMemory(1 << 20)
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	req, _ := http.NewRequest("POST", "http://payments.shop.svc/charges", strings.NewReader(`{"amount":10}`))
	req.GetBody = nil
	req.Header.Set("Idempotency-Key", "7f1c")
	resp, err = h.do(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("held POST = %v, %v; want a local 429", resp, err)
	}
	readBody(t, resp)
	if got := h.tr.ReplayMemory.InUse(); got != 0 {
		t.Fatalf("%d bytes of replay memory still reserved after the local answer", got)
	}
}

func TestCeilSeconds(t *testing.T) {
	if got := ceilSeconds(1500 * time.Millisecond); got != 2 {
		t.Fatalf("ceilSeconds(1.5s) = %d, want 2", got)
	}
	if got := ceilSeconds(retrypolicy.MaxDelay); got != int64(retrypolicy.MaxDelay/time.Second)+1 {
		t.Fatalf("ceilSeconds(MaxDelay) = %d, does not saturate cleanly", got)
	}
}
