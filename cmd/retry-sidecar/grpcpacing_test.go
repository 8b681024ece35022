package main_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
)

// Pacing of gRPC calls (docs/grpc.md#pacing, docs/pacing.md): an answer
// that holds the upstream, a pushback past retryAfter.maxWait
// (holdOnDeferral) or rate-limit metadata announcing no quota left
// (rateLimitHeaders), keeps every later call of the pod from it until the
// hold ends: a call whose deadline does not reach the end is answered by the
// sidecar at once, one that does waits in line and goes at the end.

// pacedUpstream answers call n (1, 2, …) with script(n) and counts them.
type pacedUpstream struct {
	addr   string
	script func(n int, st grpc.ServerStream) error
	mu     sync.Mutex
	at     []time.Time // when each call arrived
}

func newPacedUpstream(t *testing.T, script func(n int, st grpc.ServerStream) error) *pacedUpstream {
	u := &pacedUpstream{script: script}
	u.addr = grpctest.Serve(t, func(_ any, st grpc.ServerStream) error {
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		u.mu.Lock()
		u.at = append(u.at, time.Now())
		n := len(u.at)
		u.mu.Unlock()
		return u.script(n, st)
	})
	return u
}

func (u *pacedUpstream) arrivals() []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.at...)
}

// pacedCall makes a unary call with the app's deadline and returns its
// status, x-retry-outcome, x-retry-attempts and x-retry-not-before.
func pacedCall(cc *grpc.ClientConn, deadline time.Duration) (string, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var tr metadata.MD
	m, out := []byte("req"), []byte(nil)
	err := cc.Invoke(ctx, "/test.Paced/Call", &m, &out, grpc.Trailer(&tr))
	nb, _ := http.ParseTime(first(tr["x-retry-not-before"]))
	return fmt.Sprint(grpcstatus.Code(err), " ", first(tr["x-retry-outcome"]), " ", first(tr["x-retry-attempts"])), nb
}

func TestGRPCAnswersThatHoldTheUpstreamPaceLaterCalls(t *testing.T) {
	t.Parallel()
	ok := func(st grpc.ServerStream) error { m := []byte("ok"); return st.SendMsg(&m) }
	cases := map[string]struct {
		pacing string
		first  func(st grpc.ServerStream) error // the answer to the first call
		want   string                           // what the app got for it
		hold   time.Duration                    // how long it holds the upstream
	}{
		"a RESOURCE_EXHAUSTED with a pushback past maxWait holds the upstream until its not-before time": {
			pacing: "pacing: {holdOnDeferral: true}",
			first: func(st grpc.ServerStream) error {
				st.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", "3000"))
				return grpcstatus.Error(codes.ResourceExhausted, "quota")
			},
			want: "ResourceExhausted deferred 1", hold: 3 * time.Second},
		"rate-limit metadata announcing no quota left holds the upstream until its reset": {
			pacing: "pacing: {rateLimitHeaders: true}",
			first: func(st grpc.ServerStream) error {
				st.SetTrailer(metadata.Pairs("ratelimit", `"default";r=0;t=3`))
				return ok(st)
			},
			want: "OK success 1", hold: 3 * time.Second},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newPacedUpstream(t, func(n int, st grpc.ServerStream) error {
				if n == 1 {
					return c.first(st)
				}
				return ok(st)
			})
			s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, "maxAttempts: 3",
				"backoff: {base: 10ms, max: 20ms, jitter: None}", "retryAfter: {maxWait: 1s, spread: 1ms}",
				"retryOn: {grpcStatusCodes: [RESOURCE_EXHAUSTED]}", "replayableMethods: [/test.Paced/*]", c.pacing))
			cc := grpcClient(t, s.proxy, u.addr, viaListen)
			if got, _ := pacedCall(cc, 10*time.Second); got != c.want {
				t.Fatalf("the first call got %s; want %s", got, c.want)
			}
			holdEnd := u.arrivals()[0].Add(c.hold)
			// A call whose deadline ends before the hold does is answered
			// by the sidecar (within its 500 ms: no wait in line), and
			// never reaches the server.
			got, notBefore := pacedCall(cc, 500*time.Millisecond)
			if want := "Unavailable deferred 0"; got != want {
				t.Errorf("a call during the hold got %s; want %s", got, want)
			}
			if notBefore.Before(holdEnd.Truncate(time.Second)) {
				t.Errorf("its x-retry-not-before %v is before the hold's end %v", notBefore, holdEnd)
			}
			// A call whose deadline reaches past the hold waits in line and
			// goes at its end.
			if got, _ := pacedCall(cc, 10*time.Second); got != "OK success 1" {
				t.Errorf("a call that waited for the hold got %s; want OK success 1", got)
			}
			at := u.arrivals()
			if len(at) != 2 {
				t.Fatalf("the server saw %d calls; want 2 (the first, then the one that waited)", len(at))
			}
			if at[1].Before(holdEnd) {
				t.Errorf("the call that waited arrived %v before the hold's end", holdEnd.Sub(at[1]))
			}
			s.waitMetric(`retry_sidecar_held_requests_total{result="answered",upstream="up"}`, 1)
			s.waitMetric(`retry_sidecar_held_requests_total{result="waited",upstream="up"}`, 1)
		})
	}
}

// TestGRPCMalformedRateLimitMetadataIsCountedAndHoldsNothing: rate-limit
// metadata that does not parse is counted as a malformed HTTP header is,
// and the next call goes at once.
func TestGRPCMalformedRateLimitMetadataIsCountedAndHoldsNothing(t *testing.T) {
	t.Parallel()
	u := newPacedUpstream(t, func(n int, st grpc.ServerStream) error {
		if n == 1 {
			st.SetTrailer(metadata.Pairs("ratelimit", "not a structured field;;"))
		}
		m := []byte("ok")
		return st.SendMsg(&m)
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, "maxAttempts: 3",
		"retryOn: {grpcStatusCodes: [RESOURCE_EXHAUSTED]}", "replayableMethods: [/test.Paced/*]", "pacing: {rateLimitHeaders: true}"))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	for i := range 2 {
		if got, _ := pacedCall(cc, 500*time.Millisecond); got != "OK success 1" {
			t.Fatalf("call %d got %s; want OK success 1 (nothing held)", i+1, got)
		}
	}
	s.waitMetric(`retry_sidecar_ratelimit_header_parse_failures_total{header="Ratelimit",reason="structured-field-syntax",upstream="up"}`, 1)
}
