package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/internal/testing/grpctest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The retry data path of gRPC calls (grpcretry.go) with a test retrier in
// place of the policy's decision: real grpc-go clients and servers on
// 127.0.0.1, the forwarder between them behind an HTTP/2 server.

// retryUnavailable retries every answer UNAVAILABLE (14) while the call can
// be sent again, up to 3 attempts; it records what it was asked.
type retryUnavailable struct {
	admitEvery
	mu    sync.Mutex
	asked []string
}

// admitEvery admits every attempt and holds every answer: the test
// retriers' part of grpcRetrier that is not their decision.
type admitEvery struct{}

func (admitEvery) Committed(_ *retrypolicy.Policy, _ *http.Request, a grpcAttempt) retrypolicy.Outcome {
	if a.Status == "0" {
		return retrypolicy.OutcomeSuccess
	}
	return retrypolicy.OutcomeNotRetryable
}

func (admitEvery) Holds(*retrypolicy.Policy, *http.Request) bool { return true }
func (admitEvery) Admit(context.Context, *retrypolicy.Policy, string, int, time.Time) (limits.Ticket, grpcVerdict, error) {
	return limits.Ticket{}, grpcVerdict{}, nil
}

func (*retryUnavailable) Retries(*retrypolicy.Policy, *http.Request) bool { return true }

func (t *retryUnavailable) Decide(_ context.Context, _ *retrypolicy.Policy, _ *http.Request, a grpcAttempt) grpcVerdict {
	t.mu.Lock()
	t.asked = append(t.asked, fmt.Sprintf("%d:%s:%v", a.N, a.Status, a.Rewindable))
	if a.Err != nil {
		t.asked[len(t.asked)-1] += fmt.Sprintf(":connect=%v:refused=%v", a.ConnectFailure, a.Refused)
	}
	t.mu.Unlock()
	switch {
	case a.Refused && a.N < 3:
		return grpcVerdict{Again: true}
	case a.Err != nil:
		return grpcVerdict{Outcome: retrypolicy.OutcomeUpstreamError}
	case a.Status == "0":
		return grpcVerdict{Outcome: retrypolicy.OutcomeSuccess}
	case a.Status != "14":
		return grpcVerdict{Outcome: retrypolicy.OutcomeNotRetryable}
	case !a.Rewindable:
		return grpcVerdict{Outcome: retrypolicy.OutcomeNotReplayable}
	case a.N >= 3:
		return grpcVerdict{Outcome: retrypolicy.OutcomeExhausted}
	}
	return grpcVerdict{Again: true, Wait: 10 * time.Millisecond}
}

// scriptedUpstream answers attempt n (1, 2, …) of every call with script(n):
// it first reads all the call's messages, which it records with the
// attempt's x-retry-attempt and grpc-timeout.
type scriptedUpstream struct {
	addr   string
	script func(n int, st grpc.ServerStream) error
	mu     sync.Mutex
	got    []string        // per attempt: "x-retry-attempt [message sizes]"
	left   []time.Duration // per attempt: the time its grpc-timeout left, as the server saw it
}

func newScriptedUpstream(t *testing.T, script func(n int, st grpc.ServerStream) error) *scriptedUpstream {
	u := &scriptedUpstream{script: script}
	u.addr = grpctest.Serve(t, u.serve)
	return u
}

func (u *scriptedUpstream) serve(_ any, st grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	var sizes []int
	for {
		var m []byte
		if err := st.RecvMsg(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		sizes = append(sizes, len(m))
	}
	u.mu.Lock()
	u.got = append(u.got, fmt.Sprint(md["x-retry-attempt"], sizes))
	var left time.Duration
	if dl, ok := st.Context().Deadline(); ok {
		left = time.Until(dl)
	}
	u.left = append(u.left, left)
	n := len(u.got)
	u.mu.Unlock()
	return u.script(n, st)
}

func (u *scriptedUpstream) attempts() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

// retryingSidecar serves the forwarder with retrier behind an HTTP/2 listener
// and returns a grpc-go client of upstream through it.
func retryingSidecar(t *testing.T, upstream string, retrier grpcRetrier, maxReplay int64) *grpc.ClientConn {
	t.Helper()
	pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{upstream}, MaxAttempts: 3,
		Deadline: 10 * time.Second, MaxReplayBodyBytes: maxReplay,
		Backoff: retrypolicy.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: retrypolicy.JitterNone}})
	if err != nil {
		t.Fatal(err)
	}
	return sidecarWithPolicy(t, upstream, retrier, pol, nil)
}

// sidecarWithPolicy is retryingSidecar with the policy pol.
// With tr, each call is traced.
func sidecarWithPolicy(t *testing.T, upstream string, retrier grpcRetrier, pol *retrypolicy.Policy, tr *tracing.Tracing) *grpc.ClientConn {
	t.Helper()
	g := testForwarder(retrier)
	g.tracing = tr
	return serveForwarder(t, upstream, g, pol)
}

// testForwarder is a forwarder of the calls routed by their URL, counting
// nothing, tracing nothing, retrying by retrier.
func testForwarder(retrier grpcRetrier) *grpcForwarder {
	log := slog.New(slog.DiscardHandler)
	return &grpcForwarder{routing: byURL, reloader: config.NewReloader(config.Sources{}, log, NewMetrics()),
		h2c: newH2CTransport(DefaultOptions(), (&net.Dialer{}).DialContext), log: log, retry: retrier,
		policyName: func(*retrypolicy.Policy) string { return "ns/pol" }}
}

// serveForwarder serves g, forwarding every call under pol, behind an HTTP/2
// listener and returns a grpc-go client of upstream through it.
func serveForwarder(t *testing.T, upstream string, g *grpcForwarder, pol *retrypolicy.Policy) *grpc.ClientConn {
	t.Helper()
	t.Cleanup(g.h2c.CloseIdleConnections)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.WithContext(r.Context())
		u := *r.URL
		u.Scheme, u.Host = "http", r.Host
		out.URL = &u
		g.forward(w, r, out, pol)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := &http2.Server{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
		}
	}()
	return grpctest.Client(t, upstream, grpctest.DialTo(ln.Addr().String()))
}

// clientStream sends msgs, closes its side and reads every answer: their
// sizes, the status and the trailers' outcome and attempts.
func clientStream(ctx context.Context, cc *grpc.ClientConn, msgs ...[]byte) string {
	return clientStreamTo(ctx, cc, "/test.Retry/Call", msgs...)
}

// clientStreamTo is clientStream to method.
func clientStreamTo(ctx context.Context, cc *grpc.ClientConn, method string, msgs ...[]byte) string {
	return grpctest.Exchange(ctx, cc, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, msgs)
}

func sized(sizes ...int) [][]byte {
	var out [][]byte
	for _, n := range sizes {
		out = append(out, make([]byte, n))
	}
	return out
}

// grpcDataPathCase is a call through the data path: the upstream's script
// per attempt, the sizes of the messages the app sends, and what each side got.
type grpcDataPathCase struct {
	script    func(n int, st grpc.ServerStream) error
	send      []int
	maxReplay int64
	want      string   // what the app got
	attempts  []string // what the upstream got, per attempt
	asked     string   // what the retrier was asked
}

func unavailable() error { return grpcstatus.Error(codes.Unavailable, "try again") }

func echoOK(st grpc.ServerStream) error { m := []byte("ok"); return st.SendMsg(&m) }

func grpcDataPathCases() map[string]grpcDataPathCase {
	return map[string]grpcDataPathCase{
		"UNAVAILABLE in trailers after a message is retried, and the app sees only the last answer": {
			script: func(n int, st grpc.ServerStream) error {
				if n == 1 {
					m := []byte("not this one")
					_ = st.SendMsg(&m)
					return unavailable()
				}
				return echoOK(st)
			},
			send: []int{1, 2, 3}, maxReplay: 1 << 10,
			want:     "[2] OK success 2",
			attempts: []string{"[1] [1 2 3]", "[2] [1 2 3]"},
			asked:    "[1:14:true 2:0:true]"},
		"a Trailers-Only UNAVAILABLE is retried until maxAttempts": {
			script: func(int, grpc.ServerStream) error { return unavailable() },
			send:   []int{5}, maxReplay: 1 << 10,
			want:     "[] Unavailable exhausted 3",
			attempts: []string{"[1] [5]", "[2] [5]", "[3] [5]"},
			asked:    "[1:14:true 2:14:true 3:14:true]"},
		"an answer past 64 KiB is passed on as it comes and never retried": {
			script: func(n int, st grpc.ServerStream) error {
				m := make([]byte, 100<<10)
				_ = st.SendMsg(&m)
				return unavailable()
			},
			send: []int{5}, maxReplay: 1 << 10,
			want:     "[102400] Unavailable not-retryable 1",
			attempts: []string{"[1] [5]"},
			asked:    "[]"},
		"a request stream past maxReplayBodyBytes is sent once": {
			script: func(int, grpc.ServerStream) error { return unavailable() },
			send:   []int{600, 600}, maxReplay: 1 << 10,
			want:     "[] Unavailable not-replayable 1",
			attempts: []string{"[1] [600 600]"},
			asked:    "[1:14:false]"},
		"a request stream of megabytes within maxReplayBodyBytes is sent again whole": {
			script: func(n int, st grpc.ServerStream) error {
				if n == 1 {
					return unavailable()
				}
				return echoOK(st)
			},
			send: []int{3 << 20, 1 << 20, 1}, maxReplay: 8 << 20,
			want:     "[2] OK success 2",
			attempts: []string{"[1] [3145728 1048576 1]", "[2] [3145728 1048576 1]"},
			asked:    "[1:14:true 2:0:true]"},
	}
}

func TestGRPCRetryDataPath(t *testing.T) {
	t.Parallel()
	for name, c := range grpcDataPathCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newScriptedUpstream(t, c.script)
			retrier := &retryUnavailable{}
			cc := retryingSidecar(t, u.addr, retrier, c.maxReplay)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if got := clientStream(ctx, cc, sized(c.send...)...); got != c.want {
				t.Errorf("app got %s; want %s", got, c.want)
			}
			if got := fmt.Sprint(u.attempts()); got != fmt.Sprint(c.attempts) {
				t.Errorf("upstream got %s; want %s", got, c.attempts)
			}
			retrier.mu.Lock()
			defer retrier.mu.Unlock()
			if got := fmt.Sprint(retrier.asked); got != c.asked {
				t.Errorf("retrier asked %s; want %s", got, c.asked)
			}
		})
	}
}

func TestGRPCRetryAttemptsCarryTheTimeLeft(t *testing.T) {
	t.Parallel()
	u := newScriptedUpstream(t, func(n int, st grpc.ServerStream) error {
		if n == 1 {
			time.Sleep(300 * time.Millisecond)
			return grpcstatus.Error(codes.Unavailable, "later")
		}
		m := []byte("ok")
		return st.SendMsg(&m)
	})
	cc := retryingSidecar(t, u.addr, &retryUnavailable{}, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := clientStream(ctx, cc, []byte("x")); got != "[2] OK success 2" {
		t.Fatalf("app got %s", got)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.left) != 2 {
		t.Fatalf("deadlines %v; want 2", u.left)
	}
	if first, second := u.left[0], u.left[1]; first > 5*time.Second || first < 4*time.Second ||
		second > first-300*time.Millisecond || second < first-time.Second {
		t.Errorf("the attempts had %v and %v left; want at most 5s, then 300ms to 1s less", first, second)
	}
}

func TestGRPCPerTryTimeoutCutsAndRetriesAnAttempt(t *testing.T) {
	t.Parallel()
	const perTry = 200 * time.Millisecond
	for name, tc := range map[string]struct {
		method string
		slow   int // attempts 1..slow outlast perTryTimeout
		want   string
		sent   int // attempts the server saw
	}{
		"an attempt that answers within perTryTimeout is the only one": {
			method: "/test.Retry/Call", slow: 0, want: "[2] OK success 1", sent: 1},
		"the first attempt cut by perTryTimeout is retried for a listed method": {
			method: "/test.Retry/Call", slow: 1, want: "[2] OK success 2", sent: 2},
		"every attempt cut ends the call as DEADLINE_EXCEEDED after maxAttempts": {
			method: "/test.Retry/Call", slow: 3, want: "[] DeadlineExceeded exhausted 3", sent: 3},
		"an attempt cut for a method not listed is not sent again": {
			method: "/test.Other/Call", slow: 1, want: "[] DeadlineExceeded not-replayable 1", sent: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newScriptedUpstream(t, func(n int, st grpc.ServerStream) error {
				if n <= tc.slow {
					select { // outlast perTryTimeout; the attempt's reset ends the wait
					case <-st.Context().Done():
					case <-time.After(5 * time.Second):
					}
					return st.Context().Err()
				}
				m := []byte("ok")
				return st.SendMsg(&m)
			})
			pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{u.addr}, MaxAttempts: 3,
				Deadline: 10 * time.Second, PerTryTimeout: perTry, RetryOnGRPCStatus: []uint32{14},
				ReplayableMethods: []string{"/test.Retry/*"}, MaxReplayBodyBytes: 1 << 10,
				Backoff: retrypolicy.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: retrypolicy.JitterNone}})
			if err != nil {
				t.Fatal(err)
			}
			cc := sidecarWithPolicy(t, u.addr, &grpcPolicyRetrier{}, pol, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if got := clientStreamTo(ctx, cc, tc.method, []byte("x")); got != tc.want {
				t.Errorf("app got %s; want %s", got, tc.want)
			}
			// A cut attempt ends near perTryTimeout; one not cut would last
			// the server's 5 s. The bound sits between the two, with room for
			// a loaded machine's scheduling (2.16 s seen at load 10 on 2 CPUs
			// against the 1.8 s it was).
			if took, most := time.Since(start), time.Duration(tc.slow+1)*perTry+2500*time.Millisecond; took > most {
				t.Errorf("the call took %v; want at most %v", took, most)
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			if len(u.got) != tc.sent {
				t.Fatalf("the server saw %v; want %d attempts", u.got, tc.sent)
			}
			for i, left := range u.left {
				if left > perTry || left < perTry-100*time.Millisecond {
					t.Errorf("attempt %d had %v left by its grpc-timeout; want perTryTimeout (%v) less the way there", i+1, left, perTry)
				}
			}
		})
	}
}

func TestFormatGRPCTimeout(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second: "1n", 0: "1n", 1: "1n", 99999999: "99999999n", 100000000: "100000u",
		1500 * time.Millisecond: "1500000u", 90 * time.Second: "90000000u", 3 * time.Hour: "10800000m",
		100000 * time.Hour: "6000000M", 2000000 * time.Hour: "2000000H",
	} {
		if got := formatGRPCTimeout(d); got != want {
			t.Errorf("formatGRPCTimeout(%v) = %q; want %q", d, got, want)
		}
		if back, ok := parseGRPCTimeout(formatGRPCTimeout(d)); !ok || (d > 0 && back < d) {
			t.Errorf("formatGRPCTimeout(%v) reads back as %v, %v; want at least %v", d, back, ok, d)
		}
	}
}

func TestGRPCRetryAttemptsSayWhyNoAnswerCame(t *testing.T) {
	t.Parallel()
	refusing := grpctest.NewRefusing(t)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close()
	cases := map[string]struct {
		upstream string
		want     string // what the app got
		asked    string // what the retrier was asked
	}{
		"a refused stream is refused, sent again as a new attempt": {
			upstream: refusing.Addr,
			want:     "[2] OK success 2",
			asked:    "[1::true:connect=false:refused=true 2:0:true]"},
		"a refused connection is a connect failure": {
			upstream: downAddr,
			want:     "[] Unavailable upstream-error 1",
			asked:    "[1::true:connect=true:refused=false]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			retrier := &retryUnavailable{}
			cc := retryingSidecar(t, c.upstream, retrier, 1<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if got := clientStream(ctx, cc, []byte("x")); got != c.want {
				t.Errorf("app got %s; want %s", got, c.want)
			}
			retrier.mu.Lock()
			defer retrier.mu.Unlock()
			if got := fmt.Sprint(retrier.asked); got != c.asked {
				t.Errorf("retrier asked %s; want %s", got, c.asked)
			}
		})
	}
	if n := refusing.Streams(""); n != 2 {
		t.Errorf("the refusing upstream saw %d streams; want 2 (one refused, one answered)", n)
	}
}

func TestGRPCAppCancelDuringARetryWaitSendsNothingMore(t *testing.T) {
	t.Parallel()
	u := newScriptedUpstream(t, func(int, grpc.ServerStream) error { return grpcstatus.Error(codes.Unavailable, "x") })
	cc := retryingSidecar(t, u.addr, slowRetrier{}, 1<<10)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(u.attempts()) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // inside the 1s wait
		cancel()
	}()
	if got := clientStream(ctx, cc, []byte("x")); !strings.Contains(got, "Canceled") {
		t.Errorf("app got %s; want its own cancellation", got)
	}
	time.Sleep(1200 * time.Millisecond) // past the wait: a second attempt would have gone by now
	if got := u.attempts(); len(got) != 1 {
		t.Errorf("upstream got %v; want the first attempt only", got)
	}
}

// slowRetrier retries everything after a second.
type slowRetrier struct{ admitEvery }

func (slowRetrier) Retries(*retrypolicy.Policy, *http.Request) bool { return true }
func (slowRetrier) Decide(context.Context, *retrypolicy.Policy, *http.Request, grpcAttempt) grpcVerdict {
	return grpcVerdict{Again: true, Wait: time.Second}
}

func TestReplayStream(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		limit int
		steps func(s *replayStream) string
		want  string
	}{
		"a second attempt reads the whole stream again, the first reads no more": {
			limit: 10,
			steps: func(s *replayStream) string {
				a := s.attempt()
				first, _ := io.ReadAll(io.LimitReader(a, 4))
				b := s.attempt()
				_, errA := a.Read(make([]byte, 1))
				second, errB := io.ReadAll(b)
				return fmt.Sprintf("%s|%v|%s|%v|%v", first, errors.Is(errA, errSuperseded), second, errB, s.rewindable())
			},
			want: "abcd|true|abcdefgh|<nil>|true"},
		"a stream longer than the limit cannot start over": {
			limit: 4,
			steps: func(s *replayStream) string {
				a := s.attempt()
				all, err := io.ReadAll(a)
				return fmt.Sprintf("%s|%v|%v|%d", all, err, s.rewindable(), len(s.buf))
			},
			want: "abcdefgh|<nil>|false|0"},
		"a commit drops what was read": {
			limit: 10,
			steps: func(s *replayStream) string {
				a := s.attempt()
				first, _ := io.ReadAll(io.LimitReader(a, 6))
				s.commit()
				kept := len(s.buf)
				rest, _ := io.ReadAll(a)
				return fmt.Sprintf("%s|%d|%s|%v", first, kept, rest, s.rewindable())
			},
			want: "abcdef|2|gh|false"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newReplayStream(io.NopCloser(strings.NewReader("abcdefgh")), c.limit, nil)
			defer s.Close()
			if got := c.steps(s); got != c.want {
				t.Errorf("got %s; want %s", got, c.want)
			}
		})
	}
}
