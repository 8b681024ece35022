package retrypolicy

import (
	"net/http"
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
