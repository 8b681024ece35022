package retryhttp

import (
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The events a call reports to Transport.Observer (observer.go).

func (c *call) observeAttempt(ev *Event, n int, a retrypolicy.Attempt, d retrypolicy.Decision) {
	o := c.t.Observer
	if o == nil {
		return
	}
	ev.Kind, ev.Context = EventAttempt, c.req.Context()
	ev.RequestID, ev.Upstream = c.id, c.p.Name()
	ev.Method, ev.Path = c.req.Method, c.req.URL.Path
	ev.Attempt, ev.Status, ev.ErrorClass = n, a.Status, a.Err
	ev.Action, ev.Delay, ev.NotBefore = d.Action, d.Delay, d.NotBefore
	ev.Outcome = d.Outcome
	o.Observe(*ev)
}

// observeAdmitted reports an admission that made transmission n wait, each
// wait under the gate that made it (limits.Waits).
func (c *call) observeAdmitted(n int, w limits.Waits) {
	if c.t.Observer == nil || w == (limits.Waits{}) {
		return
	}
	c.t.Observer.Observe(Event{Kind: EventAdmitted, Context: c.req.Context(), RequestID: c.id,
		Upstream: c.p.Name(), Method: c.req.Method, Path: c.req.URL.Path, Attempt: n - 1,
		Delay: w.RateLimit, QuotaDelay: w.Quota, QueueDelay: w.Queue})
}

func (c *call) observeOutcome(o retrypolicy.Outcome, attempts, status int, notBefore time.Time) {
	c.observeOutcomePhase(o, attempts, status, notBefore, "")
}

func (c *call) observeOutcomePhase(o retrypolicy.Outcome, attempts, status int, notBefore time.Time, phase Phase) {
	obs := c.t.Observer
	if obs == nil {
		return
	}
	obs.Observe(Event{Kind: EventOutcome, Context: c.req.Context(), RequestID: c.id, Upstream: c.p.Name(),
		Method: c.req.Method, Path: c.req.URL.Path, Attempt: attempts, Status: status,
		Outcome: o, NotBefore: notBefore, Phase: phase, Elapsed: c.clk.Now().Sub(c.start)})
}

// newRequestID makes a 16-hex-digit id for requests that carry no X-Request-Id.
// Its bytes live in the call (already allocated) and are never written again,
// so the string costs no allocation of its own.
func (c *call) newRequestID() string {
	const hex = "0123456789abcdef"
	b := &c.idBuf
	x := rand.Uint64()
	for i := range b {
		b[i] = hex[x&15]
		x >>= 4
	}
	return unsafe.String(&b[0], len(b))
}
