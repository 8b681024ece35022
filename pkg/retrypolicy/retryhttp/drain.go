package retryhttp

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// The bounds of reading a retryable response's body: drained before a retry
// wait, so its connection can be reused (R9), or read ahead before it is given
// back (readAhead). The drain counts inside the wait
// (docs/retry-semantics.md#r9).
const (
	// defaultMaxDrainBytes bounds how much is read; the rest is dropped with
	// the connection.
	defaultMaxDrainBytes = 64 << 10
	// maxDrainWait bounds the time spent: a body that stalls costs its
	// connection, never the logical request's deadline.
	maxDrainWait = time.Second
)

// drainLimit is Transport.MaxDrainBytes with its default; negative means
// neither drain nor read ahead.
func (c *call) drainLimit() int64 {
	if l := c.t.MaxDrainBytes; l != 0 {
		return l
	}
	return defaultMaxDrainBytes
}

// drain reads what is left of a response that will be retried, so its
// connection can be reused (R9), bounded in bytes and in time by drainBound.
// When the time is up the attempt's context is canceled, which closes the
// connection instead.
func (c *call) drain(body io.ReadCloser, now time.Time) {
	if limit := c.drainLimit(); limit > 0 {
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

// readAhead reads the body of a retryable answer that goes back to the caller
// (its status is one the policy retries, but no retry follows) before the
// answer does: the deadline bounds everything before the final answer's
// headers, and a body that stalls would hold them
// (docs/retry-semantics.md#r9). It is bounded like a drain, in bytes by
// drainLimit and in time by the deadline (no retry follows, so no reserve is
// kept). It reports false when the answer is lost: the deadline passed or
// the caller left before the body ended, and the attempt's context is
// canceled, which closes the connection.
//
// A body that ends in time is given back from memory (its connection reused);
// one longer than the byte bound, as read so far followed by the rest,
// streamed; one cut off by the upstream, as read so far followed by the
// upstream's error, so it is never passed off as complete
// (docs/retry-semantics.md#cut-off-bodies).
func (c *call) readAhead(resp *http.Response) bool {
	limit := c.drainLimit()
	if limit <= 0 || resp.Body == nil || resp.Body == http.NoBody {
		return true
	}
	var cut atomic.Bool
	stop := c.clk.AfterFunc(max(c.deadline.Sub(c.clk.Now()), 0), func() { cut.Store(true); c.cancel() })
	read, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	stop.Stop()
	body := resp.Body
	switch {
	case err == nil && int64(len(read)) <= limit: // the whole body
		body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(read))
		resp.ContentLength, resp.TransferEncoding = int64(len(read)), nil
	case err == nil: // longer than the bound: the rest streams
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(read), body), body}
	case cut.Load() || c.req.Context().Err() != nil:
		body.Close()
		return false
	default: // cut off by the upstream
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(read), errReader{err}), body}
	}
	return true
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
