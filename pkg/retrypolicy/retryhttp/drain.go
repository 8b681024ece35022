package retryhttp

import (
	"io"
	"time"
)

// The bounds of draining a retried response body before the wait, so its
// connection can be reused (R9); the drain counts inside the wait
// (docs/retry-semantics.md#r9).
const (
	// defaultMaxDrainBytes bounds how much is read; the rest is dropped with
	// the connection.
	defaultMaxDrainBytes = 64 << 10
	// maxDrainWait bounds the time spent: a body that stalls costs its
	// connection, never the logical request's deadline.
	maxDrainWait = time.Second
)

// drain reads what is left of a response that will be retried, so its
// connection can be reused (R9), bounded in bytes and in time by drainBound.
// When the time is up the attempt's context is canceled, which closes the
// connection instead.
func (c *call) drain(body io.ReadCloser, now time.Time) {
	limit := c.t.MaxDrainBytes
	if limit == 0 {
		limit = defaultMaxDrainBytes
	}
	if limit > 0 {
		if bound := drainBound(now, c.deadline, c.p.Reserve()); bound > 0 {
			stop := c.clk.AfterFunc(bound, c.cancel)
			_, _ = io.CopyN(io.Discard, body, limit)
			stop.Stop()
		}
	}
	body.Close()
}

// drainBound is how long a drain starting at now may take: at most
// maxDrainWait, and never into the reserve before the deadline. A retry was
// decided only if it starts with its reserve left (R3), so a drain that ends
// in time leaves that retry possible.
func drainBound(now, deadline time.Time, reserve time.Duration) time.Duration {
	return min(maxDrainWait, deadline.Sub(now)-reserve)
}

// waitLeft is what remains at now of a wait of delay anchored at received:
// the time already spent (draining the response) counts inside it, never on
// top of it (docs/retry-semantics.md#r9). It is never negative.
func waitLeft(received time.Time, delay time.Duration, now time.Time) time.Duration {
	return max(received.Add(delay).Sub(now), 0)
}
