package main_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
)

// The gRPC retry matrix (docs/grpc.md#what-is-retried-when): a real grpc-go
// client calls a real grpc-go server through the real binary, and for every
// cell the server counts exactly the attempts the rules allow. The first
// attempt of a cell fails UNAVAILABLE (listed) as the cell says, every later
// one answers OK: a cell the rules retry sees 2 attempts, any other 1.
//
//	placement  Trailers-Only / after headers / after a 10-byte message /
//	           after a 100 KiB message (past the 64 KiB hold: committed)
//	pushback   absent / 0 / 200 ms / -1 / garbage
//	deadline   the app's grpc-timeout: mxShort, equal to the reserve (the
//	           policy's perTryTimeout), so that no wait (the backoff's 60 ms
//	           or the pushback) plus the reserve fits whenever the first
//	           attempt failed / mxLong (after it)
//	method     listed in replayableMethods or not
//	app        cancels after the call / before the first answer / during
//	           the wait before the retry
//
// Cells that would repeat another are left out: the app cancelling before
// the first answer is one cell per method and deadline (the server never
// answers), and cancelling during the wait only where there is a wait long
// enough to cancel in (a 200 ms pushback the rules honour): 80 + 4 + 3 = 87
// cells.

const (
	mxReplayable = "/test.Matrix/Replayable"
	mxOnce       = "/test.Matrix/Once"
)

type mxCell struct {
	placement string // "trailers-only", "after-headers", "after-message", "after-big-message"
	pushback  string // "" for none
	deadline  time.Duration
	method    string
	cancel    string // "after", "before", "during"
}

func (c mxCell) name() string {
	return fmt.Sprintf("%s/pushback=%q/deadline=%v/%s/cancel-%s", c.placement, c.pushback, c.deadline, c.method, c.cancel)
}

// mxShort is the policy's perTryTimeout, which is its reserve: a retry needs
// the wait and the reserve left, more than the whole of mxShort, so a cell
// with it is never retried however long its first attempt took. It was
// 150 ms, under the 60 ms backoff plus the 100 ms default reserve, and a
// first attempt that took longer than that to reach the server on a loaded
// machine never came (docs/development.md, "Flakes found"); the reserve now
// makes the wait long instead of the deadline short, and costs no time: the
// cells that retry wait the backoff or the pushback, not the reserve.
const (
	mxShort, mxLong = 5 * time.Second, 30 * time.Second
	mxPushbackMs    = 200
)

// retried: the rules send the call a second time.
func (c mxCell) retried() bool {
	return c.cancel == "after" && c.method == mxReplayable && c.placement != "after-big-message" &&
		(c.pushback == "" || c.pushback == "0" || c.pushback == strconv.Itoa(mxPushbackMs)) && c.deadline == mxLong
}

// outcome is x-retry-outcome and x-retry-attempts when the app lets the
// call end; "" for the short deadline, where only the count is asserted.
func (c mxCell) outcome() string {
	badPushback := c.pushback == "-1" || c.pushback == "soon"
	switch {
	case c.cancel != "after":
		return "canceled" // mxCall's word for the app's own Canceled
	case c.retried():
		return "success 2"
	case badPushback:
		return "not-retryable 1"
	case c.method != mxReplayable:
		return "not-replayable 1"
	case c.placement == "after-big-message":
		return "not-retryable 1" // committed: what the app has cannot be taken back
	}
	return ""
}

func mxCells() []mxCell {
	var cells []mxCell
	for _, method := range []string{mxReplayable, mxOnce} {
		for _, deadline := range []time.Duration{mxShort, mxLong} {
			cells = append(cells, mxCell{placement: "trailers-only", deadline: deadline, method: method, cancel: "before"})
			for _, placement := range []string{"trailers-only", "after-headers", "after-message", "after-big-message"} {
				for _, pushback := range []string{"", "0", strconv.Itoa(mxPushbackMs), "-1", "soon"} {
					c := mxCell{placement: placement, pushback: pushback, deadline: deadline, method: method, cancel: "after"}
					cells = append(cells, c)
					if c.retried() && pushback == strconv.Itoa(mxPushbackMs) {
						c.cancel = "during"
						cells = append(cells, c)
					}
				}
			}
		}
	}
	return cells
}

// mxUpstream answers the attempts of each cell (x-cell) and counts them.
type mxUpstream struct {
	addr  string
	mu    sync.Mutex
	cells map[string]*mxState
}

type mxState struct {
	cell     mxCell
	attempts int
	answered time.Time     // when the first attempt's status was sent
	gap      time.Duration // from then to the second attempt
	arrived  chan struct{} // closed when the first attempt arrived
	failed   chan struct{} // closed as the first attempt's status is sent
}

func newMXUpstream(t *testing.T) *mxUpstream {
	u := &mxUpstream{cells: map[string]*mxState{}}
	u.addr = grpctest.Serve(t, u.serve)
	return u
}

func (u *mxUpstream) add(id string, c mxCell) *mxState {
	s := &mxState{cell: c, arrived: make(chan struct{}), failed: make(chan struct{})}
	u.mu.Lock()
	u.cells[id] = s
	u.mu.Unlock()
	return s
}

func (u *mxUpstream) count(s *mxState) (int, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return s.attempts, s.gap
}

func (u *mxUpstream) serve(_ any, st grpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	var m []byte
	if err := st.RecvMsg(&m); err != nil {
		return err
	}
	u.mu.Lock()
	s := u.cells[first(md["x-cell"])]
	s.attempts++
	n := s.attempts
	if n == 2 {
		s.gap = time.Since(s.answered)
	}
	u.mu.Unlock()
	if n > 1 {
		ok := []byte("ok")
		return st.SendMsg(&ok)
	}
	close(s.arrived)
	if s.cell.cancel == "before" {
		<-st.Context().Done()
		return st.Context().Err()
	}
	return u.fail(st, s)
}

// fail answers the first attempt UNAVAILABLE where the cell puts it.
func (u *mxUpstream) fail(st grpc.ServerStream, s *mxState) error {
	c := s.cell
	if c.pushback != "" {
		st.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", c.pushback))
	}
	if err := grpctest.FailAt(st, c.placement); err != nil {
		return err
	}
	u.mu.Lock()
	s.answered = time.Now()
	u.mu.Unlock()
	close(s.failed)
	return grpcstatus.Error(codes.Unavailable, "try again")
}

func TestGRPCRetryMatrix(t *testing.T) {
	t.Parallel()
	u := newMXUpstream(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr,
		"maxAttempts: 3",
		"perTryTimeout: "+mxShort.String(),
		"backoff: {base: 60ms, max: 60ms, jitter: None}",
		"retryAfter: {maxWait: 1s, spread: 1ms}",
		"budget: {retryPercent: 100, minRetriesPerSecond: 10000}",
		"retryOn: {grpcStatusCodes: [UNAVAILABLE]}",
		"replayableMethods: ["+mxReplayable+"]"))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	cells := mxCells()
	if len(cells) != 87 {
		t.Fatalf("%d cells; the comment above says 87", len(cells))
	}
	start := time.Now()
	t.Cleanup(func() { t.Logf("%d cells in %v", len(cells), time.Since(start).Round(time.Millisecond)) })
	for i, c := range cells {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			st := u.add(strconv.Itoa(i), c)
			outcome := mxCall(cc, strconv.Itoa(i), c, st)
			want := 1
			if c.retried() {
				want = 2
			}
			if c.cancel != "after" {
				time.Sleep(mxPushbackMs*time.Millisecond + 100*time.Millisecond) // a retry the rules forbid would have come by now
			}
			got, gap := u.count(st)
			if got != want {
				t.Errorf("the server saw %d attempts; want %d (app got %s)", got, want, outcome)
			}
			if w := c.outcome(); w != "" && outcome != w {
				t.Errorf("app got %q; want %q", outcome, w)
			}
			if c.retried() && c.pushback == strconv.Itoa(mxPushbackMs) && gap < mxPushbackMs*time.Millisecond {
				t.Errorf("the retry came %v after the pushback of %d ms; never sooner", gap, mxPushbackMs)
			}
		})
	}
}

// mxCall makes the cell's call and returns x-retry-outcome and
// x-retry-attempts, or the app's own error when it cancelled.
func mxCall(cc *grpc.ClientConn, id string, c mxCell, st *mxState) string {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-cell", id), c.deadline)
	defer cancel()
	switch c.cancel {
	case "before":
		go func() { <-st.arrived; cancel() }()
	case "during":
		go func() { <-st.failed; cancel() }()
	}
	var tr metadata.MD
	m, out := []byte("req"), []byte(nil)
	err := cc.Invoke(ctx, c.method, &m, &out, grpc.Trailer(&tr))
	if c.cancel != "after" {
		if code := grpcstatus.Code(err); code != codes.Canceled {
			return fmt.Sprintf("%v, not Canceled", code)
		}
		return "canceled"
	}
	return first(tr["x-retry-outcome"]) + " " + first(tr["x-retry-attempts"])
}

func TestGRPCAttemptsAreCountedByCodeName(t *testing.T) {
	t.Parallel()
	u := newMXUpstream(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, fields(
		"retryOn: {grpcStatusCodes: [UNAVAILABLE]}", "replayableMethods: ["+mxReplayable+"]")...))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	c := mxCell{placement: "after-headers", deadline: mxLong, method: mxReplayable, cancel: "after"}
	if got := mxCall(cc, "1", c, u.add("1", c)); got != "success 2" {
		t.Fatalf("app got %q; want %q", got, "success 2")
	}
	s.waitMetric(`retry_sidecar_attempts_total{status="UNAVAILABLE",upstream="up"}`, 1)
	s.waitMetric(`retry_sidecar_attempts_total{status="OK",upstream="up"}`, 1)
	s.waitMetric(`retry_sidecar_requests_total{outcome="success",upstream="up"}`, 1)
}

func TestGRPCRetryWithoutARateLimitTokenIsShedAsUnavailable(t *testing.T) {
	t.Parallel()
	u := newMXUpstream(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, u.addr, fields(
		"deadline: 2s", "rateLimit: {requestsPerMinute: 6, burst: 1}",
		"retryOn: {grpcStatusCodes: [UNAVAILABLE]}", "replayableMethods: ["+mxReplayable+"]")...))
	cc := grpcClient(t, s.proxy, u.addr, viaListen)
	c := mxCell{placement: "trailers-only", deadline: mxLong, method: mxReplayable, cancel: "after"}
	st := u.add("1", c)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-cell", "1")
	var tr metadata.MD
	m, out := []byte("req"), []byte(nil)
	err := cc.Invoke(ctx, c.method, &m, &out, grpc.Trailer(&tr))
	// The second attempt's token comes 10 s later, past the 2 s deadline:
	// shed, in gRPC's terms, with the time to come back.
	got := fmt.Sprint(grpcstatus.Code(err), " ", grpcstatus.Convert(err).Message(), " ", tr["x-retry-outcome"], tr["x-retry-attempts"], " ", len(tr["x-retry-not-before"]))
	if want := "Unavailable retry-sidecar: shed by the upstream's admission limits [shed] [1] 1"; got != want {
		t.Errorf("app got %q; want %q", got, want)
	}
	if n, _ := u.count(st); n != 1 {
		t.Errorf("the server saw %d attempts; want 1", n)
	}
	s.waitMetric(`retry_sidecar_requests_total{outcome="shed",upstream="up"}`, 1)
}
