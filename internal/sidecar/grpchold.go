package sidecar

import (
	"io"
	"net/http"
	"sync"
)

// What a held answer costs (docs/grpc.md#what-the-sidecar-holds): its bytes
// are read into a pooled buffer, and each app connection may hold at most
// grpcConnHoldBytes of answers at once, however many streams it opens. A
// stream that finds its connection's share taken is committed there: what it
// holds is passed on, the rest streamed, and its status no longer retried.
// A call allocates nothing for the hold: the buffer is pooled, the heldAnswer
// is the call's own (BenchmarkHeldAnswer).

// grpcHoldChunk is one read of a held answer; the buffer is the hold and one
// read past it, so an answer one byte longer than the hold is seen to be.
const (
	grpcHoldChunk     = 16 << 10
	grpcConnHoldBytes = 1 << 20
)

var holdPool = sync.Pool{New: func() any {
	b := make([]byte, 0, grpcHoldBytes+grpcHoldChunk)
	return &b
}}

// holdShares are the held bytes of each app connection, by its remote
// address (one HTTP/2 connection, or one CONNECT tunnel).
type holdShares struct {
	mu   sync.Mutex
	used map[string]int
	cap  int
}

func newHoldShares(limit int) *holdShares { return &holdShares{used: map[string]int{}, cap: limit} }

// take reserves n bytes of conn's share, if they fit.
func (s *holdShares) take(conn string, n int) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[conn]+n > s.cap {
		return false
	}
	s.used[conn] += n
	return true
}

// give returns n bytes of conn's share.
func (s *holdShares) give(conn string, n int) {
	if s == nil || n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[conn] -= n; s.used[conn] <= 0 {
		delete(s.used, conn)
	}
}

// inUse is what conn holds now.
func (s *holdShares) inUse(conn string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[conn]
}

// heldAnswer is an upstream answer with what was read of its body: all of it
// (complete, trailers in resp.Trailer), or the first bytes of a committed
// answer, the rest still in resp.Body.
type heldAnswer struct {
	resp     *http.Response
	data     []byte
	complete bool
	err      error // the body broke off before its end

	buf    *[]byte // pooled; data is in it
	shares *holdShares
	conn   string
	taken  int
}

// holdBack reads resp's body until its end, past grpcHoldBytes, or until
// conn's share of shares is taken; hold false reads nothing (the answer is
// committed from its headers on).
func holdBack(resp *http.Response, hold bool, shares *holdShares, conn string) *heldAnswer {
	return holdBackInto(new(heldAnswer), resp, hold, shares, conn)
}

// holdBackInto is holdBack into h, which it overwrites: a call reuses one
// heldAnswer for all its attempts (grpcCall.held), each closed before the
// next is sent, so holding allocates nothing per call.
func holdBackInto(h *heldAnswer, resp *http.Response, hold bool, shares *holdShares, conn string) *heldAnswer {
	*h = heldAnswer{resp: resp, shares: shares, conn: conn}
	if !hold {
		return h
	}
	h.buf = holdPool.Get().(*[]byte)
	buf := (*h.buf)[:0]
	defer func() { h.data = buf }()
	for len(buf) <= grpcHoldBytes {
		if !shares.take(conn, grpcHoldChunk) {
			return h // the connection holds enough: committed
		}
		n, err := resp.Body.Read(buf[len(buf) : len(buf)+grpcHoldChunk])
		buf = buf[:len(buf)+n]
		h.taken += n
		shares.give(conn, grpcHoldChunk-n)
		if err == io.EOF {
			h.complete = true
			return h
		}
		if err != nil {
			h.complete, h.err = true, err
			return h
		}
	}
	return h
}

// close ends the answer: its body is closed, its buffer and its share given
// back. Nothing of data is read after.
func (h *heldAnswer) close() {
	h.resp.Body.Close()
	h.shares.give(h.conn, h.taken)
	h.taken = 0
	if h.buf != nil {
		*h.buf = (*h.buf)[:0]
		holdPool.Put(h.buf)
		h.buf, h.data = nil, nil
	}
}
