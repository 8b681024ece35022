package retryhttp

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// What the caller gets: the final response, with the X-Retry-* headers and a
// body whose Close returns the attempt's capacity, or an *Error, or an
// answer made locally (shed, deferred by pacing).

// finish decorates the response given back to the caller. The attempt's context
// and admission slot live until its body is closed.
func (c *call) finish(resp *http.Response, d retrypolicy.Decision, n int) *http.Response {
	c.closeRequestBody()
	c.releaseReplayMemory()
	if resp.Header == nil {
		resp.Header = make(http.Header)
	}
	c.vals[1], c.vals[2] = string(d.Outcome), attemptString(n)
	resp.Header[HeaderOutcome] = c.vals[1:2:2]
	resp.Header[HeaderAttempts] = c.vals[2:3:3]
	if d.Action == retrypolicy.Defer {
		d.NotBefore = httpdate.Ceil(d.NotBefore)
		resp.Header[HeaderNotBefore] = []string{httpdate.Format(d.NotBefore)}
	}
	c.observeOutcome(d.Outcome, n, resp.StatusCode, d.NotBefore)
	c.stopTimer()
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil {
		// An upgraded connection is not an attempt in flight any more.
		c.ticket.Release(c.clk.Now())
		c.ticket = limits.Ticket{}
		return resp
	}
	c.rc = resp.Body
	resp.Body = c
	return resp
}

// Read and Close make the call the body of the returned response.
func (c *call) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if err == io.EOF {
		c.done()
	}
	return n, err
}

func (c *call) Close() error {
	err := c.rc.Close()
	c.done()
	return err
}

func (c *call) done() {
	c.doneOnce.Do(func() {
		c.ticket.Release(c.clk.Now())
		if c.cancel != nil {
			c.cancel()
		}
	})
}

// fail ends the logical request without a response.
func (c *call) fail(o retrypolicy.Outcome, attempts int, err error) (*http.Response, error) {
	return c.failDecided(retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: o}, attempts, err, "")
}

// failDecided ends the logical request without a response as d says; a Defer
// carries its Not-Before (rounded up) into the *Error, a timeout its phase.
func (c *call) failDecided(d retrypolicy.Decision, attempts int, err error, phase Phase) (*http.Response, error) {
	c.closeRequestBody()
	if attempts == 0 {
		c.closeUnsentBody()
	}
	c.releaseReplayMemory()
	var notBefore time.Time
	if d.Action == retrypolicy.Defer {
		notBefore = httpdate.Ceil(d.NotBefore)
	}
	c.observeOutcomePhase(d.Outcome, attempts, 0, notBefore, phase)
	return nil, &Error{Outcome: d.Outcome, Attempts: attempts, Err: err, NotBefore: notBefore, Phase: phase}
}

// shed answers for an upstream with no capacity: a 503 whose Retry-After says
// when capacity returns (seconds, rounded up), outcome shed (R7).
func (c *call) shed(n int, retryAfter time.Duration) (*http.Response, error) {
	secs := max(ceilSeconds(retryAfter), 1)
	resp := c.answerLocally(n, http.StatusServiceUnavailable, "retry: upstream capacity exhausted, shed\n", secs,
		HeaderOutcome, string(retrypolicy.OutcomeShed), HeaderTimeoutPhase, string(PhaseQueue))
	if c.t.Observer != nil {
		ev := Event{Phase: PhaseQueue}
		c.observeAttempt(&ev, n, retrypolicy.Attempt{}, retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: retrypolicy.OutcomeShed})
	}
	c.observeOutcomePhase(retrypolicy.OutcomeShed, n-1, resp.StatusCode, time.Time{}, PhaseQueue)
	return resp, nil
}

// answerLocally releases the request's body and replay memory and returns a
// response the Transport made itself (shed, held): status, a plain-text msg,
// Retry-After secs, X-Retry-Attempts n-1 and the given header pairs.
func (c *call) answerLocally(n, status int, msg string, secs int64, pairs ...string) *http.Response {
	c.closeRequestBody()
	c.releaseReplayMemory()
	if n == 1 {
		c.closeUnsentBody()
	}
	h := http.Header{
		"Content-Type": {"text/plain; charset=utf-8"},
		"Retry-After":  {strconv.FormatInt(secs, 10)},
		HeaderAttempts: {attemptString(n - 1)},
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		h[pairs[i]] = []string{pairs[i+1]}
	}
	return &http.Response{
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode: status,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)),
		Request:       c.req,
	}
}

var attemptStrings = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}

func attemptString(n int) string {
	if n >= 0 && n < len(attemptStrings) {
		return attemptStrings[n]
	}
	return strconv.Itoa(n)
}
