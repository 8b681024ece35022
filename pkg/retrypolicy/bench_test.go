package retrypolicy

import (
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

func BenchmarkDecideGRPC(b *testing.B) {
	p := compile(b, grpcConfig)
	a := Attempt{Number: 2, GRPC: true, GRPCStatus: 14, Replayable: true, Hint: Hint{Delay: 800 * time.Millisecond}, HasHint: true,
		Deadline: now.Add(20 * time.Second), Random: 0.42}
	b.ReportAllocs()
	var d Decision
	for b.Loop() {
		a.Replayable = p.GRPCMethodReplayable("/shop.v1.Catalogue/List")
		d = p.DecideAt(now, a)
	}
	if d.Action != Retry {
		b.Fatal(d)
	}
}

func BenchmarkParseGRPCTimeout(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseGRPCTimeout("99999999m"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseGRPCPushback(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseGRPCPushback("800"); err != nil {
			b.Fatal(err)
		}
	}
}
