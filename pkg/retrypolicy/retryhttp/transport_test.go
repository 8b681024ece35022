package retryhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/headertest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// step is one scripted answer of the inner RoundTripper.
type step struct {
	status int
	header http.Header
	body   string
	err    error
	block  bool // wait for the attempt's context to end, then fail with its error
	// After body, the body's reads fail with bodyErr, or with stall block until
	// the attempt's context ends and fail with its error (saying so on
	// scripted.stalled).
	bodyErr error
	stall   bool
}

// sent is what the inner RoundTripper saw of one transmission.
type sent struct {
	method, attempt, idemKey, auth string
	body                           string
	at                             time.Time
}

// scripted answers each transmission with the next step and records it.
type scripted struct {
	mu     sync.Mutex
	clk    *clocktest.Clock
	steps  []step
	sent   []sent
	bodies []*respBody
	onSend func(n int) // called before answering transmission n (1-based)
	// stalled receives once for each body that stalls (step.stall), as its
	// read blocks; nil: not told.
	stalled chan struct{}
}

type respBody struct {
	r      *strings.Reader
	closed bool
	// once r is read: err, or a stall until ctx ends (told on stalled)
	err     error
	ctx     context.Context
	stalled chan<- struct{}
}

func (b *respBody) Read(p []byte) (int, error) {
	switch {
	case b.r.Len() > 0 || (b.err == nil && b.ctx == nil):
		return b.r.Read(p)
	case b.ctx != nil:
		if b.stalled != nil {
			b.stalled <- struct{}{}
			b.stalled = nil
		}
		<-b.ctx.Done()
		return 0, b.ctx.Err()
	}
	return 0, b.err
}

func (b *respBody) Close() error { b.closed = true; return nil }

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	n := len(s.sent) + 1
	var body []byte
	if req.Body != nil {
		// Like net/http: a dial failure closes the body without reading it.
		var op *net.OpError
		if n > len(s.steps) || !errors.As(s.steps[n-1].err, &op) || op.Op != "dial" {
			body, _ = io.ReadAll(req.Body)
		}
		req.Body.Close()
	}
	s.sent = append(s.sent, sent{method: req.Method, attempt: req.Header.Get(HeaderAttempt),
		idemKey: req.Header.Get("Idempotency-Key"), auth: req.Header.Get("Authorization"), body: string(body), at: s.clk.Now()})
	if n > len(s.steps) {
		s.mu.Unlock()
		return nil, errors.New("script exhausted")
	}
	st := s.steps[n-1]
	on := s.onSend
	s.mu.Unlock()
	if on != nil {
		on(n)
	}
	if st.block {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if st.err != nil {
		return nil, st.err
	}
	h := http.Header{}
	for k, v := range st.header {
		h[k] = append([]string(nil), v...)
	}
	rb := &respBody{r: strings.NewReader(st.body), err: st.bodyErr}
	if st.stall {
		rb.ctx, rb.stalled = req.Context(), s.stalled
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, rb)
	s.mu.Unlock()
	return &http.Response{StatusCode: st.status, Header: h, Body: rb, Request: req}, nil
}

// harness is a Transport on a fake clock whose sleeper records each planned
// delay, checks that every earlier response was closed first (R9), and moves the
// clock instead of sleeping.
type harness struct {
	t      *testing.T
	clk    *clocktest.Clock
	inner  *scripted
	tr     *Transport
	delays []time.Duration
	logs   bytes.Buffer
	events []Event
	// onSleep runs inside the sleeper, before it returns.
	onSleep func(ctx context.Context) error
}

func newHarness(t *testing.T, p *retrypolicy.Policy, steps ...step) *harness {
	h := &harness{t: t, clk: clocktest.NewClock(now)}
	h.inner = &scripted{clk: h.clk, steps: steps}
	h.tr = &Transport{
		Inner:  h.inner,
		Route:  Static(p),
		Clock:  h.clk,
		Random: func() float64 { return 0 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.delays = append(h.delays, d)
			h.inner.mu.Lock()
			for i, b := range h.inner.bodies {
				if !b.closed || b.r.Len() != 0 {
					h.t.Errorf("response %d not drained and closed before the wait", i+1)
				}
			}
			h.inner.mu.Unlock()
			if h.onSleep != nil {
				if err := h.onSleep(ctx); err != nil {
					return err
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			h.clk.Advance(d)
			return nil
		},
		Observer: Observers{
			NewSlogObserver(slog.New(slog.NewJSONHandler(&h.logs, nil))),
			observerFunc(func(e Event) { h.events = append(h.events, e) }),
		},
	}
	return h
}

type observerFunc func(Event)

func (f observerFunc) Observe(e Event) { f(e) }

func (h *harness) do(req *http.Request) (*http.Response, error) {
	h.t.Helper()
	return h.tr.RoundTrip(req)
}

func get(ctx context.Context, url string) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return r
}

func outcomeOf(err error) retrypolicy.Outcome {
	var e *Error
	if errors.As(err, &e) {
		return e.Outcome
	}
	return ""
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return string(b)
}

// TestTransport503Then429Then200 is the seed's integration script: the planned
// delay before each transmission is asserted exactly.
func TestTransport503Then429Then200(t *testing.T) {
	h := newHarness(t, compile(t, nil),
		step{status: 503, body: "busy"},
		step{status: 429, header: headertest.Of("Retry-After", "3"), body: "slow down"},
		step{status: 200, body: "ok"},
	)
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/pay"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "ok" {
		t.Fatalf("body = %q, want ok", got)
	}
	// Equal jitter, random 0: 0.5s after the 503; after the 429 max(1s, hint 3s) = 3s.
	if want := []time.Duration{500 * time.Millisecond, 3 * time.Second}; !equalDurations(h.delays, want) {
		t.Fatalf("planned delays = %v, want %v", h.delays, want)
	}
	if got := transmissionTimes(h.inner); !equalDurations(got, []time.Duration{0, 500 * time.Millisecond, 3500 * time.Millisecond}) {
		t.Fatalf("transmissions at %v after start", got)
	}
	if got := attempts(h.inner); got != "1,2,3" {
		t.Fatalf("X-Retry-Attempt of the transmissions = %s, want 1,2,3", got)
	}
	if resp.Header.Get(HeaderOutcome) != "success" || resp.Header.Get(HeaderAttempts) != "3" {
		t.Fatalf("outcome headers = %q/%q, want success/3", resp.Header.Get(HeaderOutcome), resp.Header.Get(HeaderAttempts))
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func transmissionTimes(s *scripted) []time.Duration {
	var out []time.Duration
	for _, x := range s.sent {
		out = append(out, x.at.Sub(now))
	}
	return out
}

func attempts(s *scripted) string {
	var a []string
	for _, x := range s.sent {
		a = append(a, x.attempt)
	}
	return strings.Join(a, ",")
}

// transportOutcomesCases are the cases of TestTransportOutcomes.
var transportOutcomesCases = map[string]struct {
	cfg          func(*retrypolicy.Config)
	steps        []step
	method, body string
	header       http.Header
	wantStatus   int
	wantBody     string
	wantOutcome  retrypolicy.Outcome
	wantAttempts string // X-Retry-Attempt of each transmission
	wantHeaders  http.Header
	wantSent     []string // bodies the upstream received; default: the body every time
}{
	"a 404 is returned at once as not-retryable": {
		steps:      []step{{status: 404, body: "nope"}},
		wantStatus: 404, wantBody: "nope", wantOutcome: retrypolicy.OutcomeNotRetryable, wantAttempts: "1",
	},
	"a 503 four times is exhausted with the last response": {
		steps:      []step{{status: 503, body: "1"}, {status: 503, body: "2"}, {status: 503, body: "3"}, {status: 503, body: "4"}},
		wantStatus: 503, wantBody: "4", wantOutcome: retrypolicy.OutcomeExhausted, wantAttempts: "1,2,3,4",
	},
	"a hint over maxWait defers with the upstream's own response and Retry-After": {
		steps:      []step{{status: 429, header: headertest.Of("Retry-After", "60"), body: "later"}},
		wantStatus: 429, wantBody: "later", wantOutcome: retrypolicy.OutcomeDeferred, wantAttempts: "1",
		wantHeaders: headertest.Of("Retry-After", "60", HeaderNotBefore, "Fri, 01 May 2026 12:01:00 GMT"),
	},
	"a malformed Retry-After falls back to the local backoff": {
		steps:      []step{{status: 503, header: headertest.Of("Retry-After", "-1")}, {status: 200, body: "ok"}},
		wantStatus: 200, wantBody: "ok", wantOutcome: retrypolicy.OutcomeSuccess, wantAttempts: "1,2",
	},
	"a request that already carries X-Retry-Attempt is not retried again": {
		header:     headertest.Of(HeaderAttempt, "2"),
		steps:      []step{{status: 503, body: "busy"}},
		wantStatus: 503, wantBody: "busy", wantOutcome: retrypolicy.OutcomeExhausted, wantAttempts: "2",
	},
	"an exhausted budget stops with the last upstream response": {
		cfg:        func(c *retrypolicy.Config) { c.Budget = &limits.BudgetConfig{RetryPercent: 0} },
		steps:      []step{{status: 503, body: "busy"}},
		wantStatus: 503, wantBody: "busy", wantOutcome: retrypolicy.OutcomeBudgetExhausted, wantAttempts: "1",
	},
	"a POST without a key is not replayed after a 503": {
		method: "POST", body: "charge 10",
		steps:      []step{{status: 503, body: "busy"}},
		wantStatus: 503, wantBody: "busy", wantOutcome: retrypolicy.OutcomeNotReplayable, wantAttempts: "1",
	},
	"a POST with an idempotency key is replayed": {
		method: "POST", body: "charge 10", header: headertest.Of("Idempotency-Key", "k-1"),
		steps:      []step{{status: 503}, {status: 200, body: "ok"}},
		wantStatus: 200, wantBody: "ok", wantOutcome: retrypolicy.OutcomeSuccess, wantAttempts: "1,2",
	},
	"a POST whose connection was refused is sent again": {
		method: "POST", body: "charge 10",
		steps:      []step{{err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}, {status: 200, body: "ok"}},
		wantStatus: 200, wantBody: "ok", wantOutcome: retrypolicy.OutcomeSuccess, wantAttempts: "1,2",
		wantSent: []string{"", "charge 10"},
	},
	"a PUT larger than maxReplayBodyBytes is streamed once": {
		cfg:    func(c *retrypolicy.Config) { c.ReplayableMethods = []string{"PUT"}; c.MaxReplayBodyBytes = 4 },
		method: "PUT", body: "12345",
		steps:      []step{{status: 503, body: "busy"}},
		wantStatus: 503, wantBody: "busy", wantOutcome: retrypolicy.OutcomeNotReplayable, wantAttempts: "1",
	},
}

func TestTransportOutcomes(t *testing.T) {
	tests := transportOutcomesCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, compile(t, tc.cfg), tc.steps...)
			method := tc.method
			if method == "" {
				method = "GET"
			}
			var body io.Reader
			if tc.body != "" {
				body = io.NopCloser(strings.NewReader(tc.body)) // hides the length: no GetBody
			}
			req, _ := http.NewRequest(method, "http://payments.shop.svc/pay", body)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := h.do(req)
			if err != nil {
				t.Fatalf("RoundTrip error %v", err)
			}
			if resp.StatusCode != tc.wantStatus || readBody(t, resp) != tc.wantBody {
				t.Fatalf("response %d, want %d %q", resp.StatusCode, tc.wantStatus, tc.wantBody)
			}
			if got := resp.Header.Get(HeaderOutcome); got != string(tc.wantOutcome) {
				t.Fatalf("X-Retry-Outcome = %q, want %q", got, tc.wantOutcome)
			}
			if got := attempts(h.inner); got != tc.wantAttempts {
				t.Fatalf("transmissions carried X-Retry-Attempt %q, want %q", got, tc.wantAttempts)
			}
			n := len(h.inner.sent)
			if got := resp.Header.Get(HeaderAttempts); got != attemptString(n) {
				t.Fatalf("X-Retry-Attempts = %q, want %d", got, n)
			}
			for k := range tc.wantHeaders {
				if got, want := resp.Header.Get(k), tc.wantHeaders.Get(k); got != want {
					t.Fatalf("%s = %q, want %q", k, got, want)
				}
			}
			for i, s := range h.inner.sent {
				want := tc.body
				if tc.wantSent != nil {
					want = tc.wantSent[i]
				}
				if s.body != want {
					t.Fatalf("transmission %d sent body %q, want %q", i+1, s.body, want)
				}
			}
		})
	}
}

func TestTransportReplaysTheSameIdempotencyKeyAndBody(t *testing.T) {
	h := newHarness(t, compile(t, nil), step{status: 503}, step{status: 429}, step{status: 201})
	req, _ := http.NewRequest("POST", "http://payments.shop.svc/charges", strings.NewReader(`{"amount":10}`))
	req.GetBody = nil // force the Transport's own buffering
	req.Header.Set("Idempotency-Key", "7f1c")
	resp, err := h.do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("RoundTrip = %v, %v", resp, err)
	}
	if len(h.inner.sent) != 3 {
		t.Fatalf("%d transmissions, want 3", len(h.inner.sent))
	}
	for i, s := range h.inner.sent {
		if s.idemKey != "7f1c" || s.body != `{"amount":10}` || s.method != "POST" {
			t.Fatalf("transmission %d = %+v; want the same key and body every time", i+1, s)
		}
	}
	if req.Header.Get(HeaderAttempt) != "" {
		t.Fatal("the caller's request was modified")
	}
}

// nonRereadable is a body that can be read once and has no GetBody.
type nonRereadable struct {
	r     io.Reader
	reads int
}

func (b *nonRereadable) Read(p []byte) (int, error) { b.reads++; return b.r.Read(p) }
func (b *nonRereadable) Close() error               { return nil }

func TestTransportSendsANonRereadableBodyOnce(t *testing.T) {
	// GET is replayable by method, but its streamed body is larger than the replay
	// limit, so after an ambiguous failure the request is not sent again.
	h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.MaxReplayBodyBytes = 3 }),
		step{err: errors.New("connection reset by peer")}, step{status: 200})
	req, _ := http.NewRequest("GET", "http://payments.shop.svc/q", &nonRereadable{r: strings.NewReader("abcdef")})
	_, err := h.do(req)
	if outcomeOf(err) != retrypolicy.OutcomeNotReplayable || len(h.inner.sent) != 1 || h.inner.sent[0].body != "abcdef" {
		t.Fatalf("err %v after %d transmissions; want not-replayable after exactly 1 with the whole body", err, len(h.inner.sent))
	}
}

// TestTransportCancellation covers R8 at its three boundaries.
func TestTransportCancellation(t *testing.T) {
	t.Run("canceled before the first attempt sends nothing", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{status: 200})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := h.do(get(ctx, "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeCanceled || len(h.inner.sent) != 0 {
			t.Fatalf("err %v, %d transmissions; want canceled and none", err, len(h.inner.sent))
		}
	})
	t.Run("canceled during the wait ends it at once and sends nothing more", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{status: 503}, step{status: 200})
		ctx, cancel := context.WithCancel(context.Background())
		h.onSleep = func(ctx context.Context) error { cancel(); return ctx.Err() }
		_, err := h.do(get(ctx, "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeCanceled || len(h.inner.sent) != 1 || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, %d transmissions; want canceled after 1", err, len(h.inner.sent))
		}
		if h.clk.Now() != now {
			t.Fatalf("the clock moved %v: the wait was not cut short", h.clk.Now().Sub(now))
		}
	})
	t.Run("canceled right after the wait is caught before sending", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{status: 503}, step{status: 200})
		ctx, cancel := context.WithCancel(context.Background())
		h.tr.Sleep = func(context.Context, time.Duration) error { cancel(); return nil } // a sleeper that misses it
		_, err := h.do(get(ctx, "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeCanceled || len(h.inner.sent) != 1 {
			t.Fatalf("err %v, %d transmissions; want canceled after 1", err, len(h.inner.sent))
		}
	})
	t.Run("the default sleeper ends at once on cancellation", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{status: 503}, step{status: 200})
		h.tr.Sleep = nil
		ctx, cancel := context.WithCancel(context.Background())
		h.inner.onSend = func(n int) {
			go func() {
				clocktest.WaitFor(t, "the wait timer", h.clk.TimerSet)
				cancel()
			}()
		}
		_, err := h.do(get(ctx, "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeCanceled || len(h.inner.sent) != 1 || h.clk.Now() != now {
			t.Fatalf("err %v, %d transmissions, clock +%v; want canceled after 1 without time passing", err, len(h.inner.sent), h.clk.Now().Sub(now))
		}
	})
	t.Run("canceled during an attempt is canceled, not retried", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{block: true}, step{status: 200})
		ctx, cancel := context.WithCancel(context.Background())
		h.inner.onSend = func(int) { cancel() }
		_, err := h.do(get(ctx, "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeCanceled || len(h.inner.sent) != 1 {
			t.Fatalf("err %v, %d transmissions; want canceled after 1", err, len(h.inner.sent))
		}
	})
}

func TestTransportTimeouts(t *testing.T) {
	t.Run("a per-try timeout is retried for a replayable request", func(t *testing.T) {
		h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.PerTryTimeout = 2 * time.Second }), step{block: true}, step{status: 200})
		h.inner.onSend = func(n int) {
			if n == 1 {
				go func() { clocktest.WaitFor(t, "the per-try timer", h.clk.TimerSet); h.clk.Advance(2 * time.Second) }()
			}
		}
		resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
		if err != nil || resp.StatusCode != 200 || len(h.inner.sent) != 2 {
			t.Fatalf("%v, %v after %d transmissions; want 200 after 2", resp, err, len(h.inner.sent))
		}
	})
	t.Run("the deadline passing during an attempt is deadline-exceeded", func(t *testing.T) {
		h := newHarness(t, compile(t, nil), step{block: true}, step{status: 200})
		h.inner.onSend = func(int) {
			go func() { clocktest.WaitFor(t, "the deadline timer", h.clk.TimerSet); h.clk.Advance(30 * time.Second) }()
		}
		_, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
		if outcomeOf(err) != retrypolicy.OutcomeDeadlineExceeded || len(h.inner.sent) != 1 {
			t.Fatalf("err %v after %d transmissions; want deadline-exceeded after 1", err, len(h.inner.sent))
		}
	})
}

// TestTransportShed covers R7 through the Transport: a full gate sheds at once
// with a synthesized 503, and capacity returns only when the body is closed.
func TestTransportShed(t *testing.T) {
	p := compile(t, func(c *retrypolicy.Config) { c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1} })
	h := newHarness(t, p, step{status: 200, body: "first"}, step{status: 200, body: "third"})
	first, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil {
		t.Fatal(err)
	}
	shed, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil || shed.StatusCode != 503 || shed.Header.Get("Retry-After") != "1" ||
		shed.Header.Get(HeaderOutcome) != "shed" || shed.Header.Get(HeaderAttempts) != "0" {
		t.Fatalf("while the first body is open: %v %v; want a synthesized 503, Retry-After 1, shed, 0 attempts", shed, err)
	}
	if len(h.inner.sent) != 1 {
		t.Fatalf("%d transmissions; a shed request must not reach the upstream", len(h.inner.sent))
	}
	readBody(t, first) // the attempt really ends here
	third, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil || third.StatusCode != 200 || readBody(t, third) != "third" {
		t.Fatalf("after the first body closed: %v, %v; want the upstream's 200", third, err)
	}
}

func TestTransportRateLimitShedsWithTheTimeCapacityReturns(t *testing.T) {
	p := compile(t, func(c *retrypolicy.Config) {
		c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 0.01, Burst: 1}
	})
	h := newHarness(t, p, step{status: 200})
	if _, err := h.do(get(context.Background(), "http://payments.shop.svc/")); err != nil {
		t.Fatal(err)
	}
	resp, err := h.do(get(context.Background(), "http://payments.shop.svc/"))
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "100" {
		t.Fatalf("second start = %v, %v; want 503 with Retry-After 100", resp, err)
	}
}

func TestTransportWithoutPolicyPassesThrough(t *testing.T) {
	h := newHarness(t, compile(t, nil), step{status: 503, body: "busy"})
	h.tr.Route = func(*http.Request) *retrypolicy.Policy { return nil }
	resp, err := h.do(get(context.Background(), "http://elsewhere.test/"))
	if err != nil || resp.StatusCode != 503 || len(h.inner.sent) != 1 {
		t.Fatalf("%v, %v, %d transmissions", resp, err, len(h.inner.sent))
	}
	if h.inner.sent[0].attempt != "" || resp.Header.Get(HeaderOutcome) != "" || resp.Header.Get(HeaderAttempts) != "" {
		t.Fatal("a request without a policy got retry headers")
	}
	if len(h.events) != 0 {
		t.Fatalf("a request without a policy produced %d events", len(h.events))
	}
}

// TestTransportLogsNoSecrets is R10: the log holds the allow-listed fields and
// never a credential, a body or a query string.
func TestTransportLogsNoSecrets(t *testing.T) {
	h := newHarness(t, compile(t, nil),
		step{status: 503, header: headertest.Of("Retry-After", "soon", "Set-Cookie", "sid=resp-cookie-secret"), body: "resp-body-secret"},
		step{status: 200, body: "resp-body-secret-2"},
	)
	req, _ := http.NewRequest("PUT", "http://payments.shop.svc/v1/pay?api_key=query-secret&x=1", strings.NewReader("req-body-secret"))
	req.Header.Set("Authorization", "Bearer auth-secret")
	req.Header.Set("Cookie", "session=cookie-secret")
	req.Header.Set("Idempotency-Key", "idem-secret")
	req.Header.Set(HeaderRequestID, "rid-42")
	resp, err := h.do(req)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	logs := h.logs.String()
	for _, secret := range []string{"auth-secret", "cookie-secret", "query-secret", "api_key", "req-body-secret", "resp-body-secret", "idem-secret", "Bearer"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log contains %q:\n%s", secret, logs)
		}
	}
	for _, want := range []string{`"request_id":"rid-42"`, `"path":"/v1/pay"`, `"upstream":"payments-api"`, `"method":"PUT"`,
		`"status":503`, `"decision":"retry"`, `"delay":500000000`, `"retry_after":"malformed"`, `"retry_after_reason":"unrecognized"`, `"outcome":"success"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if lines := strings.Count(logs, "\n"); lines != 3 {
		t.Errorf("%d log lines, want 3 (two attempts, one outcome):\n%s", lines, logs)
	}
}

// TestTransportErrorTextNeverReachesObservers: Go's *url.Error repeats the full
// URL with its query; an Event has no field that could carry it.
func TestTransportErrorTextNeverReachesObservers(t *testing.T) {
	h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.RetryOn &^= retrypolicy.RetryConnectFailure }),
		step{err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused token=query-secret")}})
	_, err := h.do(get(context.Background(), "http://payments.shop.svc/x?token=query-secret"))
	if outcomeOf(err) != retrypolicy.OutcomeUpstreamError {
		t.Fatalf("err = %v, want upstream-error", err)
	}
	if strings.Contains(h.logs.String(), "query-secret") {
		t.Fatalf("log leaks the error text:\n%s", h.logs.String())
	}
}

// TestTransportReplayMemoryIsAdmittedBeforeTheBufferIsFilled: a body whose
// replay buffer does not fit under the process-wide cap is sent once, never
// replayed, and the cap is given back when the request ends.
func TestTransportReplayMemoryIsAdmittedBeforeTheBufferIsFilled(t *testing.T) {
	tests := map[string]struct {
		capBytes      int64
		transmissions int
		outcome       retrypolicy.Outcome
	}{
		"a body that fits is buffered and replayed":      {capBytes: 1 << 10, transmissions: 2, outcome: retrypolicy.OutcomeSuccess},
		"a body that does not fit is streamed just once": {capBytes: 10, transmissions: 1, outcome: retrypolicy.OutcomeNotReplayable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, compile(t, nil), step{status: 503}, step{status: 201})
			h.tr.ReplayMemory = NewReplayMemory(tc.capBytes)
			req, _ := http.NewRequest("POST", "http://payments.shop.svc/charges", strings.NewReader(`{"amount":10}`))
			req.GetBody = nil
			req.Header.Set("Idempotency-Key", "7f1c")
			resp, err := h.do(req)
			var o retrypolicy.Outcome
			if err == nil {
				o = retrypolicy.Outcome(resp.Header.Get(HeaderOutcome))
				readBody(t, resp)
			}
			if len(h.inner.sent) != tc.transmissions || o != tc.outcome {
				t.Fatalf("%d transmissions, outcome %q (err %v); want %d, %q", len(h.inner.sent), o, err, tc.transmissions, tc.outcome)
			}
			if got := h.tr.ReplayMemory.InUse(); got != 0 {
				t.Fatalf("%d bytes still reserved after the request ended", got)
			}
		})
	}
}

// TestTransportDeadlineWithoutAResponseCarriesNotBefore: an attempt cut off by
// the deadline gives an *Error whose NotBefore is rounded up to the second.
func TestTransportDeadlineWithoutAResponseCarriesNotBefore(t *testing.T) {
	h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.Deadline = 1500 * time.Millisecond }), step{block: true})
	// The attempt's timer is armed before Inner is called: firing it from here
	// ends the blocked attempt.
	h.inner.onSend = func(int) { go h.clk.Advance(1500 * time.Millisecond) }
	_, err := h.do(get(context.Background(), "http://payments.shop.svc/q"))
	var e *Error
	if !errors.As(err, &e) || e.Outcome != retrypolicy.OutcomeDeadlineExceeded {
		t.Fatalf("err = %v, want deadline-exceeded", err)
	}
	if e.NotBefore.IsZero() || e.NotBefore.Nanosecond() != 0 || e.NotBefore.Before(now.Add(1500*time.Millisecond)) {
		t.Fatalf("NotBefore = %v; want a whole second, not before the deadline %v", e.NotBefore, now.Add(1500*time.Millisecond))
	}
}

// TestTransportTimeoutNamesItsPhase: an attempt cut off by perTryTimeout after
// the request was sent is a headers timeout, and the *Error says so; a dial
// that timed out is a connect timeout.
func TestTransportTimeoutNamesItsPhase(t *testing.T) {
	dialTimeout := &PhaseError{Phase: PhaseConnect, Err: &net.OpError{Op: "dial", Err: timeoutErr{}}}
	tests := map[string]struct {
		step  step
		phase Phase
	}{
		"no response headers within perTryTimeout": {step{block: true}, PhaseHeaders},
		"a dial that timed out":                    {step{err: dialTimeout}, PhaseConnect},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, compile(t, func(c *retrypolicy.Config) { c.MaxAttempts = 1; c.PerTryTimeout = time.Second }), tc.step)
			if tc.step.block {
				// The attempt's timer is armed before Inner is called: firing it
				// from here ends the blocked attempt.
				h.inner.onSend = func(int) { go h.clk.Advance(time.Second) }
			}
			_, err := h.do(get(context.Background(), "http://payments.shop.svc/q"))
			var e *Error
			if !errors.As(err, &e) || e.Phase != tc.phase {
				t.Fatalf("err = %#v, want an *Error with phase %q", err, tc.phase)
			}
			if last := h.events[len(h.events)-1]; last.Phase != tc.phase {
				t.Fatalf("outcome event phase %q, want %q", last.Phase, tc.phase)
			}
		})
	}
}
