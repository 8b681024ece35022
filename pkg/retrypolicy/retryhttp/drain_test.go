package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/headertest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// stalled503 is a 503 of which "0123456789" arrives, then nothing: its body
// blocks until the attempt's context ends.
func stalled503(header ...string) step {
	return step{status: 503, header: headertest.Of(header...), body: "0123456789", stall: true}
}

// theDeadlineBoundsEveryStalledBodyCases are the cases of TestTheDeadlineBoundsEveryStalledBody.
var theDeadlineBoundsEveryStalledBodyCases = map[string]struct {
	deadline    time.Duration
	maxAttempts int
	post        bool
	steps       []step
	wantSent    []time.Duration // when each attempt went out
	wantAt      time.Duration   // when the request ended
	wantCount   int             // X-Retry-Attempts
	wantNB      time.Duration   // X-Retry-Not-Before (rounded up)
}{
	// Equal backoff 1s..8s, Random 0: 0.5s after attempt 1, 1s after attempt 2.
	"a retry's drain stops at the reserve, the retry's answer at the deadline": {
		deadline: time.Second, steps: []step{stalled503(), stalled503()},
		wantSent: []time.Duration{0, 900 * time.Millisecond}, wantAt: time.Second, wantCount: 2, wantNB: 2 * time.Second},
	"a drain stops after 1s, the last attempt's answer at the deadline": {
		deadline: 10 * time.Second, maxAttempts: 2, steps: []step{stalled503(), stalled503()},
		wantSent: []time.Duration{0, time.Second}, wantAt: 10 * time.Second, wantCount: 2, wantNB: 2 * time.Second},
	"a Retry-After past the deadline defers, and its answer is cut at the deadline": {
		deadline: time.Second, steps: []step{stalled503("Retry-After", "5")},
		wantSent: []time.Duration{0}, wantAt: time.Second, wantCount: 1, wantNB: 5 * time.Second},
	"a Retry-After shorter than the drain waits inside it": {
		deadline: 3 * time.Second, maxAttempts: 2, steps: []step{stalled503("Retry-After", "0"), stalled503()},
		wantSent: []time.Duration{0, time.Second}, wantAt: 3 * time.Second, wantCount: 2, wantNB: 2 * time.Second},
	"a request that cannot be replayed has its answer cut at the deadline": {
		deadline: time.Second, post: true, steps: []step{stalled503()},
		wantSent: []time.Duration{0}, wantAt: time.Second, wantCount: 1, wantNB: time.Second},
}

// TestTheDeadlineBoundsEveryStalledBody: a retryable answer whose body stalls
// is drained before a retry for at most 1 s and never into the reserve, and
// read ahead before it is given back until the deadline at most; then its
// connection is closed (the attempt's context canceled) and the request ends
// deadline-exceeded at the deadline (docs/retry-semantics.md#r9). The clock
// moves only when a body stalls: to the bound that cuts it.
func TestTheDeadlineBoundsEveryStalledBody(t *testing.T) {
	tests := theDeadlineBoundsEveryStalledBodyCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, func(c *retrypolicy.Config) {
				c.Deadline = tc.deadline
				if tc.maxAttempts > 0 {
					c.MaxAttempts = tc.maxAttempts
				}
			})
			h := newHarness(t, p, tc.steps...)
			h.inner.stalled = make(chan struct{})
			req := get(context.Background(), "http://payments.shop.svc/pay")
			if tc.post {
				req, _ = http.NewRequest(http.MethodPost, "http://payments.shop.svc/pay", strings.NewReader("order"))
			}
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				var resp *http.Response
				if resp, err = h.do(req); resp != nil {
					resp.Body.Close()
				}
			}()
		wait:
			for {
				select {
				case <-h.inner.stalled:
					h.clk.Next() // the bound of the drain or the read-ahead
				case <-done:
					break wait
				}
			}

			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Outcome != retrypolicy.OutcomeDeadlineExceeded || e.Attempts != tc.wantCount || !e.NotBefore.Equal(now.Add(tc.wantNB)) {
				t.Errorf("outcome %s, attempts %d, not before +%v; want %s, %d, +%v",
					e.Outcome, e.Attempts, e.NotBefore.Sub(now), retrypolicy.OutcomeDeadlineExceeded, tc.wantCount, tc.wantNB)
			}
			if got := transmissionTimes(h.inner); !equalDurations(got, tc.wantSent) {
				t.Errorf("attempts sent at %v, want %v", got, tc.wantSent)
			}
			if got := h.clk.Now().Sub(now); got != tc.wantAt {
				t.Errorf("answered at +%v, want +%v", got, tc.wantAt)
			}
			for i, b := range h.inner.bodies {
				if !b.closed {
					t.Errorf("response %d never closed", i+1)
				}
			}
		})
	}
}

// TestARetryableAnswerIsReadAheadWithinItsBounds: the body of a retryable
// answer given back is read before the answer is: whole from memory when it
// ends within the byte bound, the rest streamed past it, the upstream's error
// kept when the upstream cut it off, and canceled when the caller leaves
// while it stalls.
func TestARetryableAnswerIsReadAheadWithinItsBounds(t *testing.T) {
	cutOff := errors.New("connection reset by peer")
	tests := map[string]struct {
		maxDrain    int64
		step        step
		wantBody    string
		wantLength  int64 // resp.ContentLength
		wantReadErr error
	}{
		"a body within the bound is given back from memory": {
			step: step{status: 503, body: "busy"}, wantBody: "busy", wantLength: 4},
		"a body longer than the bound streams its rest": {
			maxDrain: 4, step: step{status: 503, body: "0123456789"}, wantBody: "0123456789", wantLength: 0},
		"a body cut off by the upstream is given back with the upstream's error": {
			step: step{status: 503, body: "busy", bodyErr: cutOff}, wantBody: "busy", wantLength: 0, wantReadErr: cutOff},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.MaxAttempts = 1 }), tc.step)
			h.tr.MaxDrainBytes = tc.maxDrain
			resp, err := h.do(get(context.Background(), "http://payments.shop.svc/pay"))
			if err != nil {
				t.Fatal(err)
			}
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != tc.wantBody || !errors.Is(rerr, tc.wantReadErr) || resp.ContentLength != tc.wantLength {
				t.Errorf("body %q, read error %v, ContentLength %d; want %q, %v, %d", b, rerr, resp.ContentLength, tc.wantBody, tc.wantReadErr, tc.wantLength)
			}
			if got := resp.Header.Get(HeaderOutcome); resp.StatusCode != 503 || got != string(retrypolicy.OutcomeExhausted) {
				t.Errorf("status %d, outcome %q; want 503, exhausted", resp.StatusCode, got)
			}
			if !h.inner.bodies[0].closed {
				t.Error("the upstream's body was never closed")
			}
		})
	}

	t.Run("a caller gone while the body stalls ends canceled", func(t *testing.T) {
		h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.MaxAttempts = 1 }), stalled503())
		h.inner.stalled = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-h.inner.stalled; cancel() }()
		_, err := h.do(get(ctx, "http://payments.shop.svc/pay"))
		if got := outcomeOf(err); got != retrypolicy.OutcomeCanceled || !errors.Is(err, context.Canceled) {
			t.Errorf("err %v (outcome %q), want context.Canceled, outcome canceled", err, got)
		}
	})
}
