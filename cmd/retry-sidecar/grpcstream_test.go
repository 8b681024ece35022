package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// Streaming calls through the real binary (docs/grpc.md#in-the-sidecar):
// client-streaming, server-streaming and bidirectional calls from a real
// grpc-go client to a real grpc-go server, each attempt counted at the
// server with the request messages it read, compared byte for byte with what
// the app sent.

// The shapes of a streaming call, as the app's grpc.StreamDesc says.
const (
	shapeClient = "client-streaming"
	shapeServer = "server-streaming"
	shapeBidi   = "bidi"
)

// stMethod is the replayable or the non-replayable method of a shape.
func stMethod(shape string, replayable bool) string {
	if replayable {
		return "/test.Replayable/" + shape
	}
	return "/test.Once/" + shape
}

const stPolicyReplayable = "replayableMethods: [/test.Replayable/*]"

// stMessages are the app's request messages of a shape: three of 1 B,
// 20 KB and 40 KB for the shapes the app streams, one of 1000 B for a
// server stream; pseudo-random bytes, so that a message replayed out of
// place or cut short is seen.
func stMessages(shape string) [][]byte {
	r := rand.New(rand.NewPCG(1, uint64(len(shape))))
	sizes := []int{1, 20_000, 40_000}
	if shape == shapeServer {
		sizes = []int{1000}
	}
	var msgs [][]byte
	for _, n := range sizes {
		m := make([]byte, n)
		for i := range m {
			m[i] = byte(r.Uint32())
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func stDesc(shape string) *grpc.StreamDesc {
	return &grpc.StreamDesc{ClientStreams: shape != shapeServer, ServerStreams: shape != shapeClient}
}

// stCall sends msgs on a stream of method's shape, closes its side, reads
// every answer, and returns the sizes of the messages the app got, its
// status and the trailers' x-retry-outcome and x-retry-attempts.
func stCall(ctx context.Context, cc *grpc.ClientConn, shape, method string, msgs [][]byte) string {
	return grpctest.Exchange(ctx, cc, stDesc(shape), method, msgs)
}

// stUpstream is a grpc-go server whose calls each name their case (x-case);
// it counts the attempts of each case and keeps the messages each read.
type stUpstream struct {
	addr  string
	fail  func(c string, st grpc.ServerStream) error // the first attempt's end
	mu    sync.Mutex
	cases map[string][][][]byte // per case, per attempt, the messages read
	ended chan string           // a case whose attempt the call's end cancelled
	ready chan string           // a case whose first attempt is where the app may cancel
}

func newSTUpstream(t *testing.T, fail func(c string, st grpc.ServerStream) error) *stUpstream {
	u := &stUpstream{fail: fail, cases: map[string][][][]byte{}, ended: make(chan string, 64), ready: make(chan string, 64)}
	u.addr = grpctest.Serve(t, u.serve)
	return u
}

// attempts is what each attempt of case c read.
func (u *stUpstream) attempts(c string) [][][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][][]byte(nil), u.cases[c]...)
}

// record adds m to what attempt n of case c read.
func (u *stUpstream) record(c string, n int, m []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cases[c][n-1] = append(u.cases[c][n-1], m)
}

// serve answers attempt 1 of a case with fail, every later one by echoing
// each message it reads (a client stream: one message, "ok"), then OK.
func (u *stUpstream) serve(_ any, st grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	c := first(md[grpctest.CaseKey])
	u.mu.Lock()
	u.cases[c] = append(u.cases[c], nil)
	n := len(u.cases[c])
	u.mu.Unlock()
	if n == 1 {
		err := u.fail(c, st)
		if st.Context().Err() != nil {
			u.ended <- c
		}
		return err
	}
	if method, _ := grpc.MethodFromServerStream(st); method == stMethod(shapeClient, true) || method == stMethod(shapeClient, false) {
		if err := u.readAll(c, n, st); err != nil {
			return err
		}
		ok := []byte("ok")
		return st.SendMsg(&ok)
	}
	for {
		var m []byte
		if err := st.RecvMsg(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		u.record(c, n, m)
		if err := st.SendMsg(&m); err != nil {
			return err
		}
	}
}

// readAll reads the messages of attempt n of case c until the app's end.
func (u *stUpstream) readAll(c string, n int, st grpc.ServerStream) error {
	for {
		var m []byte
		if err := st.RecvMsg(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		u.record(c, n, m)
	}
}

// sameMessages says how got differs from want, or "" when byte-equal.
func sameMessages(got, want [][]byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d messages; want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			return fmt.Sprintf("message %d differs (%d bytes; want %d)", i+1, len(got[i]), len(want[i]))
		}
	}
	return ""
}

// stCell is a streaming call whose first attempt ends UNAVAILABLE where
// placement says: "trailers-only", "after-headers", "after-message" (10 B,
// held) or "after-big-message" (100 KiB, past the hold: committed). Every
// later attempt succeeds.
type stCell struct {
	shape      string
	replayable bool
	placement  string
}

// failFirst ends the first attempt of cell c as its placement says, after
// reading the app's messages (a bidi call: its first message only, the
// others not yet read).
func (u *stUpstream) failFirst(id string, c stCell, st grpc.ServerStream) error {
	if c.shape == shapeBidi {
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		u.record(id, 1, m)
	} else if err := u.readAll(id, 1, st); err != nil {
		return err
	}
	if err := grpctest.FailAt(st, c.placement); err != nil {
		return err
	}
	return grpcstatus.Error(codes.Unavailable, "try again")
}

// want is what the app gets: the sizes of the messages, the status,
// x-retry-outcome and x-retry-attempts.
func (c stCell) want() string {
	switch {
	case c.retried() && c.shape == shapeClient:
		return "[2] OK success 2"
	case c.retried() && c.shape == shapeServer:
		return "[1000] OK success 2"
	case c.retried():
		return "[1 20000 40000] OK success 2"
	}
	outcome := "not-replayable"
	if c.replayable {
		outcome = "not-retryable" // committed: what the app has cannot be taken back
	}
	sizes := map[string]string{"after-message": "[10]", "after-big-message": "[102400]"}[c.placement]
	if sizes == "" || c.shape == shapeClient { // grpc-go gives a client stream's message only with OK

		sizes = "[]"
	}
	return sizes + " Unavailable " + outcome + " 1"
}

func (c stCell) retried() bool { return c.replayable && c.placement != "after-big-message" }

func TestGRPCStreamingCallsAreRetriedByTheRules(t *testing.T) {
	t.Parallel()
	cells := map[string]stCell{}
	for _, shape := range []string{shapeClient, shapeServer, shapeBidi} {
		for _, replayable := range []bool{true, false} {
			for _, placement := range []string{"trailers-only", "after-headers", "after-message", "after-big-message"} {
				c := stCell{shape, replayable, placement}
				verb := map[bool]string{true: "is retried, its messages replayed", false: "is given back"}[c.retried()]
				cells[fmt.Sprintf("a %s call of a %s method failing %s %s", shape,
					map[bool]string{true: "replayable", false: "non-replayable"}[replayable], placement, verb)] = c
			}
		}
	}
	if len(cells) != 24 {
		t.Fatalf("%d cells; want 3 shapes × 2 methods × 4 placements = 24", len(cells))
	}
	u := newSTUpstream(t, nil)
	u.fail = func(id string, st grpc.ServerStream) error { return u.failFirst(id, cells[id], st) }
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, fields("maxAttempts: 3",
		"maxReplayBodyBytes: 1048576", "retryOn: {grpcStatusCodes: [UNAVAILABLE]}", stPolicyReplayable)...))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	start := time.Now()
	t.Cleanup(func() { t.Logf("%d cells in %v", len(cells), time.Since(start).Round(time.Millisecond)) })
	for name, c := range cells {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), grpctest.CaseKey, name), 20*time.Second)
			defer cancel()
			msgs := stMessages(c.shape)
			if got, want := stCall(ctx, cc, c.shape, stMethod(c.shape, c.replayable), msgs), c.want(); got != want {
				t.Errorf("app got %s; want %s", got, want)
			}
			got := u.attempts(name) // the call has ended: no attempt can follow
			want := 1
			if c.retried() {
				want = 2
			}
			if len(got) != want {
				t.Fatalf("the server saw %d attempts; want %d", len(got), want)
			}
			firstRead := msgs
			if c.shape == shapeBidi {
				firstRead = msgs[:1]
			}
			if d := sameMessages(got[0], firstRead); d != "" {
				t.Errorf("attempt 1 read %s", d)
			}
			if want == 2 {
				if d := sameMessages(got[1], msgs); d != "" {
					t.Errorf("attempt 2 read %s", d)
				}
			}
		})
	}
}

func TestGRPCStreamsRefusedUnprocessedAreRetriedForEveryMethod(t *testing.T) {
	t.Parallel()
	u := grpctest.NewRefusing(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, u.Addr, fields("maxAttempts: 3",
		"maxReplayBodyBytes: 1048576", "retryOn: {grpcStatusCodes: [UNAVAILABLE]}", stPolicyReplayable)...))
	cc := grpcClient(t, s.proxy, u.Addr, viaListen)
	for _, shape := range []string{shapeClient, shapeServer, shapeBidi} {
		for _, replayable := range []bool{true, false} {
			name := fmt.Sprintf("a refused %s call of a %s method is sent again, its messages replayed", shape,
				map[bool]string{true: "replayable", false: "non-replayable"}[replayable])
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), grpctest.CaseKey, name), 20*time.Second)
				defer cancel()
				msgs := stMessages(shape)
				if got, want := stCall(ctx, cc, shape, stMethod(shape, replayable), msgs), "[2] OK success 2"; got != want {
					t.Errorf("app got %s; want %s", got, want)
				}
				if n := u.Streams(name); n != 2 {
					t.Errorf("the server saw %d streams; want 2 (one refused, one answered)", n)
				}
				if got, want := u.Data(name), grpctest.Frame(msgs...); !bytes.Equal(got, want) {
					t.Errorf("the answered stream carried %d bytes; want the app's %d, byte-equal", len(got), len(want))
				}
			})
		}
	}
}

// holdUntilCanceled is a first attempt that reads the app's first message,
// answers as much as answer says, tells the test (ready), and waits for the
// call's end.
func (u *stUpstream) holdUntilCanceled(id string, answer []byte, st grpc.ServerStream) error {
	var m []byte
	if err := st.RecvMsg(&m); err != nil {
		return err
	}
	u.record(id, 1, m)
	if answer != nil {
		if err := st.SendMsg(&answer); err != nil {
			return err
		}
	}
	u.ready <- id
	<-st.Context().Done()
	return st.Context().Err()
}

func TestGRPCAppCancellingMidStreamStopsEverythingUpstream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		shape  string
		answer []byte // what the first attempt answers before it waits
		read   bool   // the app reads that answer before it cancels
	}{
		{name: "an app cancelling a client stream after its first message resets the attempt",
			shape: shapeClient},
		{name: "an app cancelling a server stream whose answer is held resets the attempt",
			shape: shapeServer, answer: payload(10, 'm')},
		{name: "an app cancelling a bidi stream after a message past the hold resets the attempt",
			shape: shapeBidi, answer: payload(100<<10, 'M'), read: true},
	}
	answers := map[string][]byte{}
	for _, c := range cases {
		answers[c.name] = c.answer
	}
	u := newSTUpstream(t, nil)
	u.fail = func(id string, st grpc.ServerStream) error { return u.holdUntilCanceled(id, answers[id], st) }
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, fields("maxAttempts: 3",
		"retryOn: {grpcStatusCodes: [UNAVAILABLE, CANCELLED]}", stPolicyReplayable)...))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	for i, c := range cases { // one at a time: each waits for its call to be counted
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), grpctest.CaseKey, c.name), 20*time.Second)
			defer cancel()
			st, err := cc.NewStream(ctx, stDesc(c.shape), stMethod(c.shape, true))
			if err != nil {
				t.Fatal(err)
			}
			m := stMessages(c.shape)[0]
			if err := st.SendMsg(&m); err != nil {
				t.Fatal(err)
			}
			if c.shape == shapeServer {
				_ = st.CloseSend()
			}
			waitFor(t, u.ready, c.name, "the first attempt to read the app's message")
			if c.read {
				var in []byte
				if err := st.RecvMsg(&in); err != nil || len(in) != len(c.answer) {
					t.Fatalf("app read %d bytes, %v; want the %d the server sent", len(in), err, len(c.answer))
				}
			}
			cancel()
			waitFor(t, u.ended, c.name, "the upstream attempt to be reset")
			polltest.UntilTrue(t, 10*time.Second, func() bool { // the call has ended: no attempt can follow
				return s.metric(`retry_sidecar_requests_total{outcome="canceled",upstream="up"}`) == float64(i+1)
			})
			if n := len(u.attempts(c.name)); n != 1 {
				t.Errorf("the server saw %d attempts; want 1", n)
			}
		})
	}
}

// waitFor waits until ch names the case id, failing the test after 10 s.
func waitFor(t *testing.T, ch chan string, id, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
			t.Errorf("%s came for %q while waiting for %q", what, got, id)
		case <-timeout:
			t.Fatalf("no sign of %s after 10s", what)
		}
	}
}
