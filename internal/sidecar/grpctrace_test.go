package sidecar

import (
	"cmp"
	"context"
	"encoding/hex"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// grpcTraceCases are the cases of TestGRPCCallsAreTracedWithTheirAttempts.
var grpcTraceCases = map[string]struct {
	answer      func(n int, st grpc.ServerStream) error
	passthrough bool                    // a host without a policy
	rateLimit   *limits.RateLimitConfig // the policy's, if any
	pacing      limits.PacingConfig
	want        []string
}{
	"a retry that waits in line for a pacing hold: the backoff's wait, then the hold's": {
		answer: func(n int, st grpc.ServerStream) error {
			if n == 1 { // no quota left for a second: the upstream is held
				st.SetTrailer(metadata.Pairs("ratelimit", `"default";r=0;t=1`))
				return grpcstatus.Error(codes.Unavailable, "later")
			}
			m := []byte("ok")
			return st.SendMsg(&m)
		},
		pacing: limits.PacingConfig{RateLimitHeaders: true},
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=2 retry.outcome=success retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  event retry.wait: retry.delay=0.01 retry.reason=backoff",
			"  event retry.wait: retry.delay=(>0) retry.reason=pacing",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
			"  CLIENT test.Retry/Call: http.request.resend_count=1 rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"an UNAVAILABLE with a pushback: the wait before the retry is the pushback's": {
		answer: func(n int, st grpc.ServerStream) error {
			if n == 1 {
				st.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", "50"))
				return grpcstatus.Error(codes.Unavailable, "later")
			}
			m := []byte("ok")
			return st.SendMsg(&m)
		},
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=2 retry.outcome=success retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  event retry.wait: retry.delay=0.05 retry.reason=retry_after",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
			"  CLIENT test.Retry/Call: http.request.resend_count=1 rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"a retry that waits for a rate-limit token: the backoff's wait, then the token's": {
		answer: func(n int, st grpc.ServerStream) error {
			if n == 1 {
				return grpcstatus.Error(codes.Unavailable, "later")
			}
			m := []byte("ok")
			return st.SendMsg(&m)
		},
		rateLimit: &limits.RateLimitConfig{RequestsPerSecond: 1, Burst: 1}, // the second token comes 1 s after the first
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=2 retry.outcome=success retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  event retry.wait: retry.delay=0.01 retry.reason=backoff",
			"  event retry.wait: retry.delay=(>0) retry.reason=rate_limit",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
			"  CLIENT test.Retry/Call: http.request.resend_count=1 rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"a call passed through without a policy: one attempt, no retry attributes": {
		answer:      func(int, grpc.ServerStream) error { return grpcstatus.Error(codes.Unavailable, "later") },
		passthrough: true,
		want: []string{
			"SERVER test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"an attempt cut by perTryTimeout: error.type timeout, then OK": {
		answer: func(n int, st grpc.ServerStream) error {
			if n == 1 {
				<-st.Context().Done()
				return st.Context().Err()
			}
			m := []byte("ok")
			return st.SendMsg(&m)
		},
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=2 retry.outcome=success retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  event retry.wait: retry.delay=0.01 retry.reason=backoff",
			"  CLIENT test.Retry/Call: error.type=timeout rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
			"  CLIENT test.Retry/Call: http.request.resend_count=1 rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"an UNAVAILABLE retried, then OK: two attempt spans under the call's": {
		answer: func(n int, st grpc.ServerStream) error {
			if n == 1 {
				return grpcstatus.Error(codes.Unavailable, "later")
			}
			m := []byte("ok")
			return st.SendMsg(&m)
		},
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=2 retry.outcome=success retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  event retry.wait: retry.delay=0.01 retry.reason=backoff",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=14 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
			"  CLIENT test.Retry/Call: http.request.resend_count=1 rpc.grpc.status_code=0 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
	"a status the policy does not retry: one attempt, its status on both spans": {
		answer: func(int, grpc.ServerStream) error { return grpcstatus.Error(codes.InvalidArgument, "no") },
		want: []string{
			"SERVER test.Retry/Call: retry.attempts=1 retry.outcome=not-retryable retry.policy=ns/pol retry.upstream=up rpc.grpc.status_code=3 rpc.method=Call rpc.service=test.Retry rpc.system=grpc",
			"  CLIENT test.Retry/Call: rpc.grpc.status_code=3 rpc.method=Call rpc.service=test.Retry rpc.system=grpc server.address=127.0.0.1 server.port=PORT",
		},
	},
}

// tracerToReceiver starts a real OTLP receiver and a sampling-everything
// tracer that exports to it.
func tracerToReceiver(t *testing.T) (*tracing.Tracing, *otlpreceiver.Receiver) {
	t.Helper()
	recv := otlpreceiver.New()
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	t.Setenv(tracing.EnvTracesEndpoint, srv.URL+"/v1/traces")
	t.Setenv(tracing.EnvTracesProtocol, "http/protobuf")
	t.Setenv(tracing.EnvSampler, "always_on")
	c, err := tracing.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracing.New(context.Background(), c, tracing.Counters{})
	if err != nil || tr == nil {
		t.Fatalf("tracing: %v, %v", tr, err)
	}
	return tr, recv
}

// A gRPC call through the sidecar is one SERVER span with the RPC
// conventions' attributes and the call's outcome, and one CLIENT span per
// attempt with the attempt's status, exported to a real OTLP receiver.
func TestGRPCCallsAreTracedWithTheirAttempts(t *testing.T) {
	for name, tc := range grpcTraceCases {
		t.Run(name, func(t *testing.T) {
			tr, recv := tracerToReceiver(t)
			var (
				mu      sync.Mutex
				parents []string // the span id of each attempt's traceparent, as the upstream got it
			)
			u := newScriptedUpstream(t, func(n int, st grpc.ServerStream) error {
				md, _ := metadata.FromIncomingContext(st.Context())
				if tp := md["traceparent"]; len(tp) == 1 && len(tp[0]) == 55 {
					mu.Lock()
					parents = append(parents, tp[0][36:52])
					mu.Unlock()
				}
				return tc.answer(n, st)
			})
			pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{u.addr}, MaxAttempts: 3,
				Deadline: 10 * time.Second, PerTryTimeout: 300 * time.Millisecond, RetryOnGRPCStatus: []uint32{14}, ReplayableMethods: []string{"/test.Retry/*"},
				MaxReplayBodyBytes: 1 << 10, RetryAfterMaxWait: time.Second, RateLimit: tc.rateLimit, Pacing: tc.pacing,
				Backoff: retrypolicy.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: retrypolicy.JitterNone}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.passthrough {
				pol = nil
			}
			cc := sidecarWithPolicy(t, u.addr, &grpcPolicyRetrier{}, pol, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			clientStream(ctx, cc, []byte("x"))
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			spans := recv.Spans()
			_, port, _ := net.SplitHostPort(u.addr)
			want := slices.Clone(tc.want)
			for i := range want {
				want[i] = strings.ReplaceAll(want[i], "PORT", port)
			}
			if got := spanLines(spans); !slices.Equal(got, want) {
				t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			var clients []string
			for _, s := range spans {
				if s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
					clients = append(clients, hex.EncodeToString(s.GetSpanId()))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(parents, clients) {
				t.Errorf("the upstream got the parents %v; want the attempt spans %v", parents, clients)
			}
		})
	}
}

// spanLines renders spans as "KIND name: attributes", each root followed by
// its children (indented) in the order they started.
func spanLines(spans []otlpreceiver.Span) []string {
	slices.SortFunc(spans, func(a, b otlpreceiver.Span) int {
		return cmp.Compare(a.GetStartTimeUnixNano(), b.GetStartTimeUnixNano())
	})
	ids := map[string]bool{}
	for _, s := range spans {
		ids[string(s.GetSpanId())] = true
	}
	line := func(s otlpreceiver.Span, indent string) string {
		var kv []string
		for _, a := range s.GetAttributes() {
			kv = append(kv, a.GetKey()+"="+otlpreceiver.Value(a.GetValue()))
		}
		slices.Sort(kv)
		kind := strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")
		return indent + kind + " " + s.GetName() + ": " + strings.Join(kv, " ")
	}
	var out []string
	for _, root := range spans {
		if ids[string(root.GetParentSpanId())] {
			continue
		}
		out = append(out, line(root, ""))
		out = append(out, eventLines(root)...)
		for _, c := range spans {
			if string(c.GetParentSpanId()) == string(root.GetSpanId()) {
				out = append(out, line(c, "  "))
			}
		}
	}
	return out
}

// eventLines renders the events of s as "  event name: attributes"; the
// retry.delay of a wait whose length the machine decides (admission's, not
// the policy's backoff or the server's pushback) as "(>0)".
func eventLines(s otlpreceiver.Span) []string {
	var out []string
	for _, e := range s.GetEvents() {
		var kv []string
		exact := false
		for _, a := range e.GetAttributes() {
			v := otlpreceiver.Value(a.GetValue())
			if a.GetKey() == "retry.reason" {
				exact = v == "backoff" || v == "retry_after"
			}
			kv = append(kv, a.GetKey()+"="+v)
		}
		for i, a := range kv {
			if d, ok := strings.CutPrefix(a, "retry.delay="); ok && !exact && d != "0" {
				kv[i] = "retry.delay=(>0)"
			}
		}
		slices.Sort(kv)
		out = append(out, "  event "+e.GetName()+": "+strings.Join(kv, " "))
	}
	return out
}
