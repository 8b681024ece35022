package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

func grpcTestPolicy(t *testing.T) *retrypolicy.Policy {
	t.Helper()
	pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{"up"}, MaxAttempts: 3,
		Deadline: 10 * time.Second, RetryOnGRPCStatus: []uint32{14, 8}, ReplayableMethods: []string{"/pkg.Svc/Get"},
		RetryAfterMaxWait: time.Second, MaxReplayBodyBytes: 1 << 10,
		Backoff: retrypolicy.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: retrypolicy.JitterNone}})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func TestGRPCPolicyRetrierDecidesByThePolicy(t *testing.T) {
	t.Parallel()
	pol := grpcTestPolicy(t)
	far := time.Now().Add(time.Hour)
	unavailable := grpcAttempt{N: 1, Status: "14", HTTPStatus: 200, Rewindable: true, Deadline: far}
	with := func(f func(*grpcAttempt)) grpcAttempt { a := unavailable; f(&a); return a }
	cases := map[string]struct {
		method string
		a      grpcAttempt
		want   string // Again Wait Outcome NotBefore-set
	}{
		"OK is a success": {a: with(func(a *grpcAttempt) { a.Status = "0" }), want: "false 0s success false"},
		"a listed status of a replayable method is retried after the backoff": {
			a: unavailable, want: "true 10ms  false"},
		"a pushback of 300 ms is the wait": {
			a: with(func(a *grpcAttempt) { a.Pushback = "300" }), want: "true 300ms  false"},
		"a pushback of 0 leaves the backoff": {
			a: with(func(a *grpcAttempt) { a.Pushback = "0" }), want: "true 10ms  false"},
		"a negative pushback asks for no retry": {
			a: with(func(a *grpcAttempt) { a.Pushback = "-1" }), want: "false 0s not-retryable false"},
		"a malformed pushback asks for no retry": {
			a: with(func(a *grpcAttempt) { a.Pushback = "1.5" }), want: "false 0s not-retryable false"},
		"a pushback past retryAfter.maxWait defers the call": {
			a: with(func(a *grpcAttempt) { a.Pushback = "5000" }), want: "false 0s deferred true"},
		"a status not listed is given back": {
			a: with(func(a *grpcAttempt) { a.Status = "5" }), want: "false 0s not-retryable false"},
		"a grpc-status that is not a number is given back": {
			a: with(func(a *grpcAttempt) { a.Status = "1x" }), want: "false 0s not-retryable false"},
		"an HTTP 503 without grpc-status is UNAVAILABLE": {
			a: with(func(a *grpcAttempt) { a.Status, a.HTTPStatus = "", 503 }), want: "true 10ms  false"},
		"a method replayableMethods does not list is not sent again": {
			method: "/pkg.Svc/Charge", a: unavailable, want: "false 0s not-replayable false"},
		"a refused stream is retried for every method": {
			method: "/pkg.Svc/Charge", a: grpcAttempt{N: 1, Err: errUnprocessed, Refused: true, Rewindable: true, Deadline: far},
			want: "true 10ms  false"},
		"the last of maxAttempts is exhausted": {
			a: with(func(a *grpcAttempt) { a.N = 3 }), want: "false 0s exhausted false"},
		"a call another layer retries is sent once": {
			a: with(func(a *grpcAttempt) { a.Nested = true }), want: "false 0s exhausted false"},
		"a backoff past the deadline is deadline-exceeded": {
			a: with(func(a *grpcAttempt) { a.Deadline = time.Now().Add(50 * time.Millisecond) }), want: "false 0s deadline-exceeded true"},
		"a pushback past the deadline is deferred": {
			a: with(func(a *grpcAttempt) {
				a.Pushback, a.Deadline = "500", time.Now().Add(300*time.Millisecond)
			}), want: "false 0s deferred true"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			method := c.method
			if method == "" {
				method = "/pkg.Svc/Get"
			}
			out := &http.Request{URL: &url.URL{Path: method}}
			v := (&grpcPolicyRetrier{random: func() float64 { return 0 }}).Decide(context.Background(), pol, out, c.a)
			if got := fmt.Sprint(v.Again, v.Wait, " ", v.Outcome, " ", !v.NotBefore.IsZero()); got != c.want {
				t.Errorf("verdict %q; want %q", got, c.want)
			}
		})
	}
}

func TestGRPCPolicyRetrierAdmits(t *testing.T) {
	t.Parallel()
	pol := grpcTestPolicy(t)
	shedding, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{"up"}, MaxAttempts: 3,
		Deadline: 10 * time.Second, RateLimit: &limits.RateLimitConfig{RequestsPerSecond: 1, Burst: 1},
		Backoff: retrypolicy.Backoff{Base: time.Millisecond, Max: time.Millisecond, Jitter: retrypolicy.JitterNone}})
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	r := &grpcPolicyRetrier{}
	soon := time.Now().Add(200 * time.Millisecond)
	cases := []struct {
		name     string
		ctx      context.Context
		pol      *retrypolicy.Policy
		deadline time.Time
		want     string
	}{
		{"an attempt within the deadline is admitted", context.Background(), pol, soon, " <nil>"},
		{"an attempt past the deadline is not", context.Background(), pol, time.Now().Add(-time.Millisecond), "deadline-exceeded " + errGRPCDeadline.Error()},
		{"an attempt of a call the app reset is not", canceled, pol, soon, "canceled " + errGRPCCanceled.Error()},
		{"the rate limit's one token goes to the first attempt", context.Background(), shedding, soon, " <nil>"},
		{"the second attempt within its second is shed", context.Background(), shedding, soon, "shed " + errGRPCShed.Error()},
	}
	for _, c := range cases { // in order: the rate limit's state carries over
		tk, v, err := r.Admit(c.ctx, c.pol, "/test.Retry/Call", 1, c.deadline)
		tk.Release(time.Now())
		if got := fmt.Sprint(v.Outcome, " ", err); got != c.want {
			t.Errorf("%s: got %q; want %q", c.name, got, c.want)
		}
		if errors.Is(err, errGRPCShed) && v.NotBefore.IsZero() {
			t.Errorf("%s: shed without a time capacity returns", c.name)
		}
	}
}

func TestGRPCRefusedStreamIsRetriedByThePolicyForAMethodItDoesNotList(t *testing.T) {
	t.Parallel()
	refusing := grpctest.NewRefusing(t)
	cc := retryingSidecar(t, refusing.Addr, &grpcPolicyRetrier{random: func() float64 { return 0 }}, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// retryingSidecar's policy lists no gRPC method: only a stream the
	// upstream refused unprocessed may be sent again.
	if got, want := clientStream(ctx, cc, []byte("x")), "[2] OK success 2"; got != want {
		t.Errorf("app got %s; want %s", got, want)
	}
	if got := refusing.Streams(""); got != 2 {
		t.Errorf("upstream saw %d streams; want 2 (the refused one, then the retry)", got)
	}
}
