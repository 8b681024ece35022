package retryhttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/rules"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// canned answers every request with the same 200 and an empty body, so the
// benchmarks below measure only the Transport's own work.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func benchTransport(b *testing.B, route func(*http.Request) *retrypolicy.Policy, method string, body string) {
	benchTransportWith(b, &Transport{Inner: canned{}, Route: route}, method, body, "r1")
}

func benchTransportWith(b *testing.B, tr *Transport, method, body, requestID string) {
	req, _ := http.NewRequestWithContext(context.Background(), method, "http://payments.shop.svc/pay?x=1", nil)
	req.Header.Set("Accept", "application/json")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	b.ReportAllocs()
	for b.Loop() {
		if body != "" {
			req.Body = io.NopCloser(strings.NewReader(body))
			req.ContentLength = int64(len(body))
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// BenchmarkTransportNoPolicy is the pass-through baseline (the canned inner's own
// allocations included).
func BenchmarkTransportNoPolicy(b *testing.B) {
	benchTransport(b, func(*http.Request) *retrypolicy.Policy { return nil }, "GET", "")
}

// BenchmarkTransportNoRetry is one GET under a policy answered 200 at once: the
// overhead of the fast path over BenchmarkTransportNoPolicy.
func BenchmarkTransportNoRetry(b *testing.B) {
	benchTransport(b, Static(compile(b, nil)), "GET", "")
}

// BenchmarkTransportNoRetryObserved is the sidecar's path: an observer is set
// and the request carries no X-Request-Id, so one is generated.
func BenchmarkTransportNoRetryObserved(b *testing.B) {
	tr := &Transport{Inner: canned{}, Route: Static(compile(b, nil)), Observer: observerFunc(func(Event) {})}
	benchTransportWith(b, tr, "GET", "", "")
}

// BenchmarkTransportNoRetryPOST streams a non-replayable body (never buffered).
func BenchmarkTransportNoRetryPOST(b *testing.B) {
	benchTransport(b, Static(compile(b, func(c *retrypolicy.Config) { c.RetryOn &^= retrypolicy.RetryConnectFailure })), "POST", `{"amount":10}`)
}

// BenchmarkTransportNoRetryLimits adds a budget, a rate limiter and a gate,
// none of which ever makes a request wait: the overhead of admission itself.
// The rate limit is the largest Compile allows (the whole fleet's largest
// quota, with the largest burst); a loop faster than that would measure the
// limiter's waits instead, so every burst of requests gets a fresh policy,
// compiled outside the timer, whose bucket is full.
func BenchmarkTransportNoRetryLimits(b *testing.B) {
	limited := func() *retrypolicy.Policy {
		return compile(b, func(c *retrypolicy.Config) {
			c.Budget = &limits.BudgetConfig{RetryPercent: 20, MinRetriesPerSecond: 10}
			c.RateLimit = &limits.RateLimitConfig{
				RequestsPerSecond: float64(rules.RequestsPerMinuteRange.Max) / 60,
				Burst:             int(rules.BurstRange.Max),
			}
			c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 64}
		})
	}
	p := limited()
	tr := &Transport{Inner: canned{}, Route: func(*http.Request) *retrypolicy.Policy { return p }}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://payments.shop.svc/pay?x=1", nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Request-Id", "r1")
	b.ReportAllocs()
	sent := 0
	for b.Loop() {
		if sent++; sent == int(rules.BurstRange.Max) {
			b.StopTimer()
			p, sent = limited(), 0
			b.StartTimer()
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// TestTransportNoRetryAllocs bounds the allocations of the sidecar's fast path
// (policy, observer, generated request id, one 200), the canned inner's 2
// included, so a regression shows up in `go test`, not only in benchmarks.
func TestTransportNoRetryAllocs(t *testing.T) {
	tr := &Transport{Inner: canned{}, Route: Static(compile(t, nil)), Observer: observerFunc(func(Event) {})}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://payments.shop.svc/pay?x=1", nil)
	req.Header.Set("Accept", "application/json")
	n := testing.AllocsPerRun(200, func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	})
	if n > 11 {
		t.Errorf("%v allocs per no-retry request, want ≤ 11", n)
	}
}

// cannedRateLimit answers 200 with rate-limit headers that leave quota.
type cannedRateLimit struct{}

func (cannedRateLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Ratelimit": {`"default";r=50;t=30`}}, Body: http.NoBody, Request: req}, nil
}

// BenchmarkTransportNoRetryPaced reads the rate-limit headers of every response
// (pacing.rateLimitHeaders) while no hold is in force.
func BenchmarkTransportNoRetryPaced(b *testing.B) {
	p := compile(b, func(c *retrypolicy.Config) {
		c.Pacing = limits.PacingConfig{RateLimitHeaders: true, HoldOnDeferral: true}
	})
	benchTransportWith(b, &Transport{Inner: cannedRateLimit{}, Route: Static(p)}, "GET", "", "r1")
}

// TestTransportPacingAddsNoAllocations: with no hold in force, pacing (the hold
// check before the attempt, the header parse after it) allocates nothing.
func TestTransportPacingAddsNoAllocations(t *testing.T) {
	run := func(p *retrypolicy.Policy) float64 {
		tr := &Transport{Inner: cannedRateLimit{}, Route: Static(p), Observer: observerFunc(func(Event) {})}
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://payments.shop.svc/pay", nil)
		return testing.AllocsPerRun(200, func() {
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
	plain := run(compile(t, nil))
	paced := run(compile(t, func(c *retrypolicy.Config) {
		c.Pacing = limits.PacingConfig{RateLimitHeaders: true, HoldOnDeferral: true}
	}))
	if paced != plain {
		t.Fatalf("%v allocs per paced request, %v without pacing; want the same", paced, plain)
	}
}
