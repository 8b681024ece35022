package retryhttp

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Request bodies (R4): buffered up to maxReplayBodyBytes and replayed, or
// streamed once; replay memory is reserved before a buffer is filled.

type bodyKind uint8

const (
	bodyNone     bodyKind = iota // no body: always rewindable
	bodyGetBody                  // in-process GetBody
	bodyBuffered                 // buffered up to maxReplayBodyBytes
	bodyTracked                  // streamed; rewindable while never read
	bodyStream                   // streamed once
)

type bodySource struct {
	kind    bodyKind
	buf     []byte
	tracked *trackedBody
}

// prepareBody decides how the request body can be sent again (R4).
func (c *call) prepareBody() error {
	req, p := c.req, c.p
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		c.body.kind = bodyNone
	case req.GetBody != nil:
		c.body.kind = bodyGetBody
	case c.idem && !c.nested && p.MaxAttempts() > 1 && req.ContentLength <= p.MaxReplayBodyBytes() &&
		c.reserveReplayMemory(replayReservation(req.ContentLength, p.MaxReplayBodyBytes())):
		limit := p.MaxReplayBodyBytes()
		if req.ContentLength > 0 { // 0 with a non-nil Body means "unknown" for clients
			limit = req.ContentLength
		}
		buf := make([]byte, 0, min(limit+1, 32<<10))
		if req.ContentLength > 0 {
			buf = make([]byte, 0, limit+1) // reserved already: read without regrowing
		}
		buf, err := readUpTo(req.Body, buf, limit+1)
		if err != nil {
			req.Body.Close()
			return err
		}
		if int64(len(buf)) <= p.MaxReplayBodyBytes() && (req.ContentLength <= 0 || int64(len(buf)) == req.ContentLength) {
			req.Body.Close()
			c.body = bodySource{kind: bodyBuffered, buf: buf}
			return nil
		}
		// Longer than announced or than the replay limit: send what was read and
		// the rest once, never replayed.
		c.body = bodySource{kind: bodyStream}
		c.body.tracked = &trackedBody{rc: struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}}
		c.body.tracked.read.Store(true)
	case p.Retries(retrypolicy.RetryConnectFailure) && !c.nested && p.MaxAttempts() > 1:
		c.body = bodySource{kind: bodyTracked, tracked: &trackedBody{rc: req.Body}}
	default:
		c.body.kind = bodyStream
	}
	return nil
}

// replayReservation is what a replay buffer may grow to: the announced length
// plus the one byte that detects a longer body, or twice the replay limit for a
// body of unknown length (the buffer doubles as it grows).
func replayReservation(contentLength, maxReplay int64) int64 {
	if contentLength > 0 {
		return contentLength + 1
	}
	return 2*maxReplay + 1
}

func (c *call) reserveReplayMemory(n int64) bool {
	if !c.t.ReplayMemory.tryReserve(n) {
		return false
	}
	c.reserved = n
	return true
}

func (c *call) releaseReplayMemory() {
	c.t.ReplayMemory.release(c.reserved)
	c.reserved = 0
}

func readUpTo(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := min(int64(cap(buf)), limit)
		n, err := r.Read(buf[len(buf):room])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func (c *call) rewindable() bool {
	switch c.body.kind {
	case bodyNone, bodyGetBody, bodyBuffered:
		return true
	case bodyTracked:
		return !c.body.tracked.read.Load()
	}
	return false
}

func (b bodySource) getBody() (io.ReadCloser, error) {
	return &replayBody{Reader: bytes.NewReader(b.buf)}, nil
}

type replayBody struct{ *bytes.Reader }

func (*replayBody) Close() error { return nil }

// trackedBody is a streamed body that may be sent again as long as nobody has
// read from it (a connect failure never touches it). Close from the inner
// transport is held back while it is unread, so a resend can still use it.
type trackedBody struct {
	rc     io.ReadCloser
	read   atomic.Bool
	closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.rc.Read(p)
}

func (b *trackedBody) Close() error {
	if b.read.Load() {
		return b.closeUnderlying()
	}
	return nil
}

func (b *trackedBody) closeUnderlying() error {
	if b.closed.CompareAndSwap(false, true) {
		return b.rc.Close()
	}
	return nil
}

func (c *call) closeRequestBody() {
	if c.body.tracked != nil {
		_ = c.body.tracked.closeUnderlying()
	}
}

// closeUnsentBody closes the caller's body when it never reached Inner: a
// RoundTripper must always close it.
func (c *call) closeUnsentBody() {
	switch c.body.kind {
	case bodyGetBody:
		c.req.Body.Close()
	case bodyStream:
		if c.body.tracked == nil {
			c.req.Body.Close()
		}
	}
}
