package ratelimitheader

import (
	"net/http"
	"testing"
	"time"
)

// received is the receipt time of the benchmarks' responses.
var received = time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC)

func BenchmarkParseRateLimitStructured(b *testing.B) {
	h := http.Header{"Ratelimit": {`"default";r=0;t=30`}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Parse(h, received).Hold(); !ok {
			b.Fatal("no hold")
		}
	}
}

func BenchmarkParseRateLimitStructuredWithPolicy(b *testing.B) {
	h := http.Header{"Ratelimit": {`"default";r=0`}, "Ratelimit-Policy": {`"default";q=100;w=60`}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Parse(h, received).Hold(); !ok {
			b.Fatal("no hold")
		}
	}
}

func BenchmarkParseRateLimitXDelta(b *testing.B) {
	h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Parse(h, received).Hold(); !ok {
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
		Parse(h, received)
	}
}
