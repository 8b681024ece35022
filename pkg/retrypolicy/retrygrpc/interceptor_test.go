package retrygrpc_test

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retrygrpc"
)

const check = "/grpc.health.v1.Health/Check"

var start = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// step is what the server answers to one attempt: a status (codes.OK answers
// the health check), a grpc-retry-pushback-ms trailer if pushback is set, or
// no answer until the attempt's deadline (stall).
type step struct {
	code     codes.Code
	pushback string
	stall    bool
}

func fail(c codes.Code) step                { return step{code: c} }
func pushback(c codes.Code, ms string) step { return step{code: c, pushback: ms} }
func stall() step                           { return step{stall: true} }

// server is a real grpc-go server on 127.0.0.1 with the health service, whose
// attempts a server interceptor answers by script (after the script: OK).
type server struct {
	mu        sync.Mutex
	script    []step
	attempts  int
	numbers   []string        // x-retry-attempt of each attempt
	remaining []time.Duration // the deadline each attempt arrived with
}

func startServer(t testing.TB, script []step) (*server, string) {
	t.Helper()
	s := &server{script: script}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(s.answer))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return s, lis.Addr().String()
}

func (s *server) answer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	s.mu.Lock()
	n := s.attempts
	s.attempts++
	md, _ := metadata.FromIncomingContext(ctx)
	s.numbers = append(s.numbers, md.Get("x-retry-attempt")...)
	if d, ok := ctx.Deadline(); ok {
		s.remaining = append(s.remaining, time.Until(d))
	}
	st := step{code: codes.OK}
	if n < len(s.script) {
		st = s.script[n]
	}
	s.mu.Unlock()
	switch {
	case st.stall:
		<-ctx.Done()
		return nil, ctx.Err()
	case st.pushback != "":
		grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", st.pushback))
	}
	if st.code != codes.OK {
		return nil, status.Error(st.code, "scripted")
	}
	return h(ctx, req)
}

// policy: 3 attempts, 10s deadline, backoff 100ms·2^i without jitter,
// UNAVAILABLE and RESOURCE_EXHAUSTED for every method of the health service,
// maxWait 2s, no spread.
func policy(t testing.TB, mutate func(*retrypolicy.Config)) *retrypolicy.Policy {
	t.Helper()
	c := retrypolicy.Config{
		Name: "health", Hosts: []string{"127.0.0.1"}, MaxAttempts: 3, Deadline: 10 * time.Second,
		Backoff:           retrypolicy.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: retrypolicy.JitterNone},
		RetryOnGRPCStatus: []uint32{uint32(codes.Unavailable), uint32(codes.ResourceExhausted)},
		ReplayableMethods: []string{"/grpc.health.v1.Health/*"},
		RetryAfterMaxWait: 2 * time.Second,
	}
	if mutate != nil {
		mutate(&c)
	}
	p, err := retrypolicy.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// unaryClientInterceptorCases are the cases of TestUnaryClientInterceptor.
var unaryClientInterceptorCases = map[string]struct {
	script        []step
	policy        func(*retrypolicy.Config)
	callerTimeout time.Duration // 0: none
	nested        bool          // the call already carries x-retry-attempt
	cancelAtWait  bool          // the caller cancels when the interceptor waits
	wantAttempts  int           // at the server
	wantCode      codes.Code
	wantReport    retrygrpc.Report
	wantWaits     []time.Duration
}{
	"OK at once is one attempt": {
		wantAttempts: 1, wantCode: codes.OK, wantReport: retrygrpc.Report{Attempts: 1, Outcome: "success"}},
	"UNAVAILABLE twice, then OK, after the backoff": {
		script: []step{fail(codes.Unavailable), fail(codes.Unavailable)}, wantAttempts: 3, wantCode: codes.OK,
		wantReport: retrygrpc.Report{Attempts: 3, Outcome: "success"}, wantWaits: []time.Duration{100e6, 200e6}},
	"UNAVAILABLE three times exhausts the 3 attempts": {
		script:       []step{fail(codes.Unavailable), fail(codes.Unavailable), fail(codes.Unavailable)},
		wantAttempts: 3, wantCode: codes.Unavailable,
		wantReport: retrygrpc.Report{Attempts: 3, Outcome: "exhausted"}, wantWaits: []time.Duration{100e6, 200e6}},
	"INTERNAL is not a listed status": {
		script: []step{fail(codes.Internal)}, wantAttempts: 1, wantCode: codes.Internal,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "not-retryable"}},
	"UNAVAILABLE of a method the policy does not list is sent once": {
		script:       []step{fail(codes.Unavailable)},
		policy:       func(c *retrypolicy.Config) { c.ReplayableMethods = []string{"/grpc.health.v1.Health/Watch"} },
		wantAttempts: 1, wantCode: codes.Unavailable, wantReport: retrygrpc.Report{Attempts: 1, Outcome: "not-replayable"}},
	"a pushback of 800 ms is waited exactly": {
		script: []step{pushback(codes.ResourceExhausted, "800")}, wantAttempts: 2, wantCode: codes.OK,
		wantReport: retrygrpc.Report{Attempts: 2, Outcome: "success"}, wantWaits: []time.Duration{800e6}},
	"a pushback of 0 keeps the backoff": {
		script: []step{pushback(codes.Unavailable, "0")}, wantAttempts: 2, wantCode: codes.OK,
		wantReport: retrygrpc.Report{Attempts: 2, Outcome: "success"}, wantWaits: []time.Duration{100e6}},
	"a negative pushback is the server asking for no retry": {
		script: []step{pushback(codes.Unavailable, "-1")}, wantAttempts: 1, wantCode: codes.Unavailable,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "not-retryable"}},
	"a malformed pushback is no retry either": {
		script: []step{pushback(codes.Unavailable, "soon")}, wantAttempts: 1, wantCode: codes.Unavailable,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "not-retryable"}},
	"a pushback over maxWait is deferred, never shortened": {
		script: []step{pushback(codes.ResourceExhausted, "5000")}, wantAttempts: 1, wantCode: codes.ResourceExhausted,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "deferred", NotBefore: start.Add(5 * time.Second)}},
	"a pushback past the policy's deadline is deferred": {
		script: []step{pushback(codes.ResourceExhausted, "1500")}, policy: func(c *retrypolicy.Config) { c.Deadline = time.Second },
		wantAttempts: 1, wantCode: codes.ResourceExhausted,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "deferred", NotBefore: start.Add(2 * time.Second)}}, // 1.5 s, rounded up
	"a backoff past the caller's deadline is not waited": {
		script: []step{fail(codes.Unavailable)}, policy: func(c *retrypolicy.Config) { c.Backoff.Base = time.Second },
		callerTimeout: 1050 * time.Millisecond, wantAttempts: 1, wantCode: codes.Unavailable,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "deadline-exceeded", NotBefore: start.Add(time.Second)}},
	"the caller cancelling during the wait ends the call": {
		script: []step{fail(codes.Unavailable)}, cancelAtWait: true, wantAttempts: 1, wantCode: codes.Canceled,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "canceled"}, wantWaits: []time.Duration{100e6}},
	"a call another retrying layer already marked is not multiplied": {
		script: []step{fail(codes.Unavailable)}, nested: true, wantAttempts: 1, wantCode: codes.Unavailable,
		wantReport: retrygrpc.Report{Attempts: 1, Outcome: "exhausted"}},
	// perTryTimeout runs on the wall clock and also bounds the retry that
	// answers OK (and the first dial): 50 ms let all three attempts time
	// out, none reaching the server, in 1 run under load; 1 s does not.
	"a stalled attempt ended by perTryTimeout is retried for a replayable method": {
		script: []step{stall()}, policy: func(c *retrypolicy.Config) { c.PerTryTimeout = time.Second },
		wantAttempts: 2, wantCode: codes.OK, wantReport: retrygrpc.Report{Attempts: 2, Outcome: "success"},
		wantWaits: []time.Duration{100e6}},
}

func TestUnaryClientInterceptor(t *testing.T) {
	tests := unaryClientInterceptorCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv, addr := startServer(t, tc.script)
			clk := clocktest.NewClock(start)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy(t, tc.policy), retrygrpc.WithClock(clk))))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.callerTimeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.callerTimeout)
				defer cancel()
			}
			if tc.nested {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-retry-attempt", "1")
			}
			var rep retrygrpc.Report
			var trailer metadata.MD
			done := make(chan error, 1)
			go func() {
				done <- conn.Invoke(ctx, check, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{},
					retrygrpc.ReportTo(&rep), grpc.Trailer(&trailer))
			}()
			waits, err := drive(t, clk, done, func() {
				if tc.cancelAtWait {
					cancel()
				}
			})
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("code %v (%v), want %v", got, err, tc.wantCode)
			}
			if rep != tc.wantReport {
				t.Errorf("report %+v, want %+v", rep, tc.wantReport)
			}
			if !slices.Equal(waits, tc.wantWaits) {
				t.Errorf("waits %v, want %v", waits, tc.wantWaits)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if srv.attempts != tc.wantAttempts {
				t.Errorf("the server got %d attempts, want %d", srv.attempts, tc.wantAttempts)
			}
			if got, want := trailer.Get("x-retry-outcome"), []string{string(tc.wantReport.Outcome)}; !slices.Equal(got, want) {
				t.Errorf("trailer x-retry-outcome %q, want %q", got, want)
			}
			if got, want := trailer.Get("x-retry-attempts"), []string{strconv.Itoa(tc.wantReport.Attempts)}; !slices.Equal(got, want) {
				t.Errorf("trailer x-retry-attempts %q, want %q", got, want)
			}
			if want := tc.wantReport.NotBefore; !want.IsZero() {
				if got := trailer.Get("x-retry-not-before"); !slices.Equal(got, []string{want.Format(http.TimeFormat)}) {
					t.Errorf("trailer x-retry-not-before %q, want %q", got, want.Format(http.TimeFormat))
				}
			}
			var wantNumbers []string
			for n := range tc.wantAttempts {
				if tc.nested {
					wantNumbers = append(wantNumbers, "1") // the caller's mark, passed through
				}
				wantNumbers = append(wantNumbers, strconv.Itoa(n+1))
			}
			if !slices.Equal(srv.numbers, wantNumbers) {
				t.Errorf("x-retry-attempt at the server %q, want %q", srv.numbers, wantNumbers)
			}
		})
	}
}

// drive runs the virtual clock for a call on another goroutine: each time the
// interceptor waits it records the wait and fires it (or runs atWait, which
// ends the call), until the call returns.
func drive(t *testing.T, clk *clocktest.Clock, done <-chan error, atWait func()) ([]time.Duration, error) {
	t.Helper()
	var waits []time.Duration
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	// Every attempt of these tests ends within 1 s of real time (a stall by
	// its perTryTimeout); 10 s means an attempt that nothing bounds.
	hung := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			return waits, err
		case <-hung:
			t.Fatalf("the call has not returned after 10 s (waits so far %v)", waits)
		case <-tick.C:
		}
		if at, ok := clk.NextAt(); ok {
			waits = append(waits, at.Sub(clk.Now()))
			atWait()
			clk.Next()
		}
	}
}

// Each attempt carries the time left of the call as its own deadline
// (grpc-timeout): the policy's 10 s less the waits before it.
func TestEachAttemptCarriesTheTimeLeft(t *testing.T) {
	srv, addr := startServer(t, []step{fail(codes.Unavailable), fail(codes.Unavailable)})
	clk := clocktest.NewClock(start)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy(t, nil), retrygrpc.WithClock(clk))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan error, 1)
	go func() {
		done <- conn.Invoke(context.Background(), check, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	}()
	if _, err := drive(t, clk, done, func() {}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	want := []time.Duration{10 * time.Second, 9900 * time.Millisecond, 9700 * time.Millisecond}
	if len(srv.remaining) != len(want) {
		t.Fatalf("deadlines at the server %v, want about %v", srv.remaining, want)
	}
	for i, got := range srv.remaining {
		// The wire's grpc-timeout and the time in flight take a little off.
		if got > want[i] || got < want[i]-250*time.Millisecond {
			t.Errorf("attempt %d arrived with %v left, want %v (at most 250 ms less)", i+1, got, want[i])
		}
	}
}
