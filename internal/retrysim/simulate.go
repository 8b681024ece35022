package retrysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// SimulateInput is one logical request and the upstream's scripted answers.
type SimulateInput struct {
	Policy *retrypolicy.Policy
	// Method and Header of the app's request (Method "" = GET). Header may carry
	// the idempotency key.
	Method string
	Header http.Header
	// URL of the request; "" = http://<the upstream's first host>/.
	URL string
	// Responses are the upstream's answers to attempts 1, 2, …
	Responses []Response
	// Seed seeds the jitter (Transport.Random).
	Seed uint64
	// Start is the virtual time of the request (the clock HTTP-dates are
	// compared with).
	Start time.Time
}

// Step is one attempt of the timeline. Times are Go duration strings, relative
// to the start of the logical request.
type Step struct {
	N int `json:"n"`
	// At is when the attempt was sent (after any admission wait).
	At string `json:"at"`
	// Response is the scripted token, or "(not sent)" when admission shed it.
	Response string `json:"response"`
	// Decision is retry, stop or defer.
	Decision string `json:"decision"`
	// Wait is the planned wait before the next attempt (decision retry).
	Wait string `json:"wait,omitempty"`
	// Outcome ends the request (decisions stop and defer).
	Outcome string `json:"outcome,omitempty"`
	// NotBefore is the earliest allowed retry (decision defer), relative.
	NotBefore string `json:"notBefore,omitempty"`
	// RetryAfter is how the Retry-After header parsed: seconds, imf-fixdate,
	// rfc850, asctime, malformed (with RetryAfterReason), or empty when absent.
	RetryAfter       string `json:"retryAfter,omitempty"`
	RetryAfterReason string `json:"retryAfterReason,omitempty"`
	// Skew is local receipt time minus the response's Date header.
	Skew string `json:"skew,omitempty"`
	// ErrorClass of an attempt without a response: connect-failure or ambiguous.
	ErrorClass string `json:"errorClass,omitempty"`
	// Admission is how long the attempt waited for admission (a rateLimit token
	// or a concurrency slot) before it was sent.
	Admission string `json:"admission,omitempty"`
	// TimedOut is how long the attempt ran before its timer ended it, with no
	// answer (a "timeout" token): perTryTimeout, or what was left of the
	// deadline when that came first (TimedOutBy).
	TimedOut   string `json:"timedOut,omitempty"`
	TimedOutBy string `json:"timedOutBy,omitempty"`
	// Pushback is a gRPC answer's grpc-retry-pushback-ms as parsed, the exact
	// minimum wait; PushbackReason the parse error's reason when the value
	// is negative or malformed (the server asks for no retry).
	Pushback       string `json:"pushback,omitempty"`
	PushbackReason string `json:"pushbackReason,omitempty"`
	// Backoff is the local backoff of a gRPC retry, and WaitBy which set the
	// wait: backoff, or pushback (plus jitter up to retryAfter.spread).
	Backoff string `json:"backoff,omitempty"`
	WaitBy  string `json:"waitBy,omitempty"`

	// at is when the attempt was sent, end when it ended (its answer, or
	// its timer).
	at, end, wait, notBefore time.Duration
}

// SimulateResult is the timeline and what the app got back from the sidecar.
type SimulateResult struct {
	Upstream string `json:"upstream"`
	Method   string `json:"method"`
	URL      string `json:"url"`
	Seed     uint64 `json:"seed"`
	// Start is the virtual start time (RFC 3339).
	Start    string `json:"start"`
	Attempts []Step `json:"attempts"`
	Outcome  string `json:"outcome"`
	// Status and Headers are the response the app received from the sidecar.
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	// Duration is the virtual time from the request to the app's answer.
	Duration string `json:"duration"`
	// Unused counts scripted responses the policy never asked for.
	Unused int `json:"unusedResponses,omitempty"`

	duration time.Duration
}

// ErrRanOut reports a script shorter than the attempts the policy made.
var ErrRanOut = errors.New("ran out of responses")

// Simulate sends one request through the sidecar's own proxy handler and
// retryhttp.Transport, with a virtual clock and an upstream that answers
// with in.Responses in order. The decisions are the sidecar's, not a copy of
// them: only time and the network are simulated.
func Simulate(in SimulateInput) (SimulateResult, error) {
	method := in.Method
	if method == "" {
		method = http.MethodGet
	}
	url := in.URL
	if url == "" {
		url = "http://" + exampleHost(in.Policy.Config().Hosts) + "/"
	}
	clk := clocktest.NewClock(in.Start)
	rec := &recorder{start: in.Start, clk: clk}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := &script{clk: clk, responses: in.Responses, rec: rec, abort: cancel, perTry: in.Policy.Config().PerTryTimeout}
	rng := rand.New(rand.NewPCG(in.Seed, in.Seed^0x9e3779b97f4a7c15))
	rt := &retryhttp.Transport{
		Inner:    up,
		Route:    retryhttp.Static(in.Policy),
		Observer: rec,
		Clock:    clk,
		Sleep: func(ctx context.Context, d time.Duration) error {
			clk.Advance(d)
			return ctx.Err()
		},
		Random: rng.Float64,
	}
	proxy := &sidecar.Proxy{Transport: rt, Metrics: sidecar.NewMetrics(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Route: retryhttp.Static(in.Policy)}

	req := httptest.NewRequestWithContext(ctx, method, url, nil)
	for k, vs := range in.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	proxy.ServeHTTP(w, req)
	if up.ranOut {
		return SimulateResult{}, fmt.Errorf("--responses: %w: the policy made attempt %d; add what the upstream answers next",
			ErrRanOut, len(in.Responses)+1)
	}

	res := SimulateResult{
		Upstream: in.Policy.Name(), Method: method, URL: url, Seed: in.Seed,
		Start: in.Start.UTC().Format(time.RFC3339), Attempts: rec.steps,
		Outcome: w.Header().Get(retryhttp.HeaderOutcome), Status: w.Code,
		Headers: map[string]string{}, Unused: len(in.Responses) - up.next,
	}
	res.duration = clk.Now().Sub(in.Start)
	res.Duration = res.duration.String()
	for k, v := range w.Header() {
		res.Headers[k] = strings.Join(v, ", ")
	}
	if res.Attempts == nil {
		res.Attempts = []Step{}
	}
	return res, nil
}

// exampleHost turns the first host pattern into a host a request could name.
func exampleHost(hosts []string) string {
	if len(hosts) == 0 {
		return "upstream.invalid"
	}
	h := hosts[0]
	if strings.HasPrefix(h, "*.") {
		return "api" + h[1:]
	}
	return h
}

// script is the simulated upstream: it answers attempt n with responses[n-1].
type script struct {
	clk       *clocktest.Clock
	responses []Response
	next      int
	rec       *recorder
	abort     context.CancelFunc
	ranOut    bool
	perTry    time.Duration // the policy's perTryTimeout, 0 without one
}

func (s *script) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.next >= len(s.responses) {
		// The script ended: end the logical request as the caller would, by
		// going away; Simulate reports it as a usage error.
		s.ranOut = true
		s.abort()
		return nil, req.Context().Err()
	}
	r := s.responses[s.next]
	s.next++
	s.rec.sent(s.next, r)
	switch r.Failure {
	case FailureRefused:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case FailureTimeout:
		// No answer: time runs until the attempt's timer (perTryTimeout or the
		// deadline) ends it.
		ctx := req.Context()
		sent := s.clk.Now()
		for ctx.Err() == nil && s.clk.Next() {
		}
		if ctx.Err() == nil {
			return nil, errors.New("retrysim: timeout with no timer pending")
		}
		s.rec.timedOut(s.next, s.clk.Now().Sub(sent), s.perTry)
		return nil, ctx.Err()
	}
	body := "simulated " + strconv.Itoa(r.Status) + "\n"
	h := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	set := func(k, v string) {
		if v != "" {
			h[k] = []string{v}
		}
	}
	set("Retry-After", r.RetryAfter)
	set("Date", r.Date)
	set("Ratelimit-Remaining", r.RateLimitRemaining)
	set("Ratelimit-Reset", r.RateLimitReset)
	return &http.Response{
		Status: strconv.Itoa(r.Status) + " " + http.StatusText(r.Status), StatusCode: r.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}, nil
}

// recorder builds the timeline from what the upstream saw and what the
// Transport reported to its Observer.
type recorder struct {
	start time.Time
	clk   *clocktest.Clock
	steps []Step
}

func (r *recorder) step(n int) *Step {
	for len(r.steps) < n {
		r.steps = append(r.steps, Step{N: len(r.steps) + 1, Response: "(not sent)"})
	}
	return &r.steps[n-1]
}

func (r *recorder) sent(n int, resp Response) {
	s := r.step(n)
	s.Response = resp.String()
	s.at = r.clk.Now().Sub(r.start)
	s.At = s.at.String()
	ready := time.Duration(0) // when the attempt could have been sent without admission
	if n > 1 {
		prev := r.steps[n-2]
		ready = prev.end + prev.wait
	}
	if s.at > ready {
		s.Admission = (s.at - ready).String()
	}
}

// timedOut records that attempt n ran d with no answer until a timer ended it:
// perTry (the policy's perTryTimeout) when d is that, else the deadline.
func (r *recorder) timedOut(n int, d, perTry time.Duration) {
	s := r.step(n)
	s.TimedOut, s.TimedOutBy = d.String(), "deadline"
	if perTry > 0 && d == perTry {
		s.TimedOutBy = "perTryTimeout"
	}
}

// Observe implements retryhttp.Observer.
func (r *recorder) Observe(e retryhttp.Event) {
	if e.Kind != retryhttp.EventAttempt {
		return
	}
	s := r.step(e.Attempt)
	if s.Response == "(not sent)" {
		s.at = r.clk.Now().Sub(r.start)
		s.At = s.at.String()
	}
	s.end = r.clk.Now().Sub(r.start)
	s.Decision = e.Action.String()
	if e.Action == retrypolicy.Retry {
		s.wait = e.Delay
		s.Wait = e.Delay.String()
	} else {
		s.Outcome = string(e.Outcome)
	}
	if !e.NotBefore.IsZero() {
		s.notBefore = e.NotBefore.Sub(r.start)
		s.NotBefore = s.notBefore.String()
	}
	if e.RetryAfter != retryhttp.RetryAfterAbsent {
		s.RetryAfter, s.RetryAfterReason = string(e.RetryAfter), e.RetryAfterReason
	}
	if e.HasSkew {
		s.Skew = e.Skew.String()
	}
	if e.ErrorClass != retrypolicy.NoError {
		s.ErrorClass = e.ErrorClass.String()
	}
}

// SortedHeaders returns the header names of res in order.
func (res SimulateResult) SortedHeaders() []string {
	keys := make([]string, 0, len(res.Headers))
	for k := range res.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
