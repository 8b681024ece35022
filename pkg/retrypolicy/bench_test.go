package retrypolicy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func BenchmarkDecide(b *testing.B) {
	p := compile(b, nil)
	a := Attempt{Number: 2, Status: 429, Replayable: true, Rewindable: true, Hint: hint(3 * time.Second), HasHint: true,
		Deadline: now.Add(20 * time.Second), Random: 0.42}
	b.ReportAllocs()
	var d Decision
	for b.Loop() {
		d = p.DecideAt(now, a)
	}
	if d.Action != Retry {
		b.Fatal(d)
	}
}

func BenchmarkParseRetryAfterSeconds(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRetryAfter("120", received, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRetryAfterIMFFixdate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", received, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRetryAfterIMFFixdateWithDate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", received, "Sun, 06 Nov 1994 08:48:37 GMT"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSetMatch(b *testing.B) {
	p := compile(b, func(c *Config) { c.Hosts = []string{"api.example:8443", "*.svc"} })
	s, _ := NewSet(p)
	b.ReportAllocs()
	for b.Loop() {
		if s.Match("payments.shop.svc") == nil {
			b.Fatal("no match")
		}
	}
}

// canned answers every request with the same 200 and an empty body, so the
// benchmarks below measure only the Transport's own work.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func benchTransport(b *testing.B, route func(*http.Request) *Policy, method string, body string) {
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
	benchTransport(b, func(*http.Request) *Policy { return nil }, "GET", "")
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
	benchTransport(b, Static(compile(b, func(c *Config) { c.RetryOnConnectFailure = false })), "POST", `{"amount":10}`)
}

// BenchmarkTransportNoRetryLimits adds a budget, a rate limiter and a gate.
func BenchmarkTransportNoRetryLimits(b *testing.B) {
	p := compile(b, func(c *Config) {
		c.Budget = &BudgetConfig{RetryPercent: 20, MinRetriesPerSecond: 10}
		c.RateLimit = &RateLimitConfig{RequestsPerSecond: 1e9, Burst: 1 << 20}
		c.Concurrency = &ConcurrencyConfig{MaxInFlight: 64}
	})
	benchTransport(b, Static(p), "GET", "")
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

func BenchmarkParseRateLimitStructured(b *testing.B) {
	h := http.Header{"Ratelimit": {`"default";r=0;t=30`}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseRateLimit(h, received).Hold(); !ok {
			b.Fatal("no hold")
		}
	}
}

func BenchmarkParseRateLimitStructuredWithPolicy(b *testing.B) {
	h := http.Header{"Ratelimit": {`"default";r=0`}, "Ratelimit-Policy": {`"default";q=100;w=60`}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseRateLimit(h, received).Hold(); !ok {
			b.Fatal("no hold")
		}
	}
}

func BenchmarkParseRateLimitXDelta(b *testing.B) {
	h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseRateLimit(h, received).Hold(); !ok {
			b.Fatal("no hold")
		}
	}
}

// BenchmarkParseRateLimitXEpoch includes the Date header, read to take the
// longer of reset − received and reset − Date.
func BenchmarkParseRateLimitXEpoch(b *testing.B) {
	h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1777636830"}, "Date": {"Fri, 01 May 2026 11:59:00 GMT"}}
	b.ReportAllocs()
	for b.Loop() {
		ParseRateLimit(h, received)
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
	p := compile(b, func(c *Config) { c.Pacing = PacingConfig{RateLimitHeaders: true, HoldOnDeferral: true} })
	benchTransportWith(b, &Transport{Inner: cannedRateLimit{}, Route: Static(p)}, "GET", "", "r1")
}

// TestTransportPacingAddsNoAllocations: with no hold in force, pacing (the hold
// check before the attempt, the header parse after it) allocates nothing.
func TestTransportPacingAddsNoAllocations(t *testing.T) {
	run := func(p *Policy) float64 {
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
	paced := run(compile(t, func(c *Config) { c.Pacing = PacingConfig{RateLimitHeaders: true, HoldOnDeferral: true} }))
	if paced != plain {
		t.Fatalf("%v allocs per paced request, %v without pacing; want the same", paced, plain)
	}
}
