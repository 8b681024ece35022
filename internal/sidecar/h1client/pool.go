package h1client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

func (t *Transport) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if t.DialContext != nil {
		return t.DialContext
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return d.DialContext
}

func (t *Transport) maxIdlePerHost() int {
	if t.MaxIdleConnsPerHost > 0 {
		return t.MaxIdleConnsPerHost
	}
	return 2
}

// getConn returns an idle connection to key or dials a new one, waiting for a
// slot when MaxConnsPerHost is reached. A pooled connection is checked before
// it is handed out: one the server closed while idle (Node and Apache close
// idle keep-alive connections after 5 s) or that holds unsolicited bytes is
// discarded, so no request is ever written to it.
func (t *Transport) getConn(ctx context.Context, key string, o *TLSOrigin) (*conn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, errClosed
		}
		if t.hosts == nil {
			t.hosts = make(map[string]*host)
		}
		h := t.hosts[key]
		if h == nil {
			h = &host{}
			t.hosts[key] = h
		}
		if c := t.popIdle(h); c != nil {
			t.mu.Unlock()
			if !c.alive() {
				t.discard(c)
				continue
			}
			return c, nil
		}
		if t.MaxConnsPerHost <= 0 || h.total < t.MaxConnsPerHost {
			h.total++
			t.mu.Unlock()
			return t.dial(ctx, key, o)
		}
		// At the limit: wait for a connection to come back (or a slot to free).
		ch := make(chan *conn, 1)
		h.waiters = append(h.waiters, ch)
		t.mu.Unlock()
		select {
		case c := <-ch:
			if c == nil { // a slot: h.total was kept for us
				return t.dial(ctx, key, o)
			}
			if !c.alive() {
				t.discard(c)
				continue
			}
			return c, nil
		case <-ctx.Done():
			t.mu.Lock()
			for i, w := range h.waiters {
				if w == ch {
					h.waiters = append(h.waiters[:i], h.waiters[i+1:]...)
					break
				}
			}
			t.mu.Unlock()
			select { // handed over meanwhile: pass it on
			case c := <-ch:
				if c == nil {
					t.freeSlot(key)
				} else {
					t.putIdle(c)
				}
			default:
			}
			return nil, ctx.Err()
		}
	}
}

// popIdle takes the most recent idle connection that has not expired; t.mu held.
func (t *Transport) popIdle(h *host) *conn {
	for len(h.idle) > 0 {
		c := h.idle[len(h.idle)-1]
		h.idle[len(h.idle)-1] = nil
		h.idle = h.idle[:len(h.idle)-1]
		t.idleTotal--
		if t.IdleConnTimeout > 0 && time.Since(c.idleAt) > t.IdleConnTimeout {
			h.total--
			go c.nc.Close()
			continue
		}
		c.reused = true
		return c
	}
	return nil
}

// dial opens a connection for key: plain TCP to key, or TLS to o. A TLS
// connection that negotiated HTTP/2 goes to the HTTP/2 pool, frees its slot
// here, and comes back as a conn with only h2 set (a stream reserved).
//
// The dial and the TLS handshake are bounded by the attempt's connect timeout
// (retryhttp.ConnectTimeout) when the request carries one. Errors are tagged
// with their phase (connect, or tls for the handshake) and stay the dialer's
// own underneath (*net.OpError{Op: "dial"} or *net.DNSError).
func (t *Transport) dial(ctx context.Context, key string, o *TLSOrigin) (*conn, error) {
	dctx := ctx
	if d, ok := retryhttp.ConnectTimeout(ctx); ok && d > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var nc net.Conn
	var err error
	if o != nil {
		var tc *tls.Conn
		tc, err = t.dialTLS(dctx, o)
		if err == nil && tc.ConnectionState().NegotiatedProtocol == "h2" {
			t.freeSlot(key)
			cc, herr := t.newH2(ctx, key, o.Addr, tc)
			if herr != nil {
				return nil, herr
			}
			if rerr := cc.Reserve(); rerr != nil {
				return nil, rerr
			}
			return &conn{t: t, key: key, h2: cc}, nil
		}
		if err == nil {
			nc = tc
		}
	} else {
		nc, err = t.dialer()(dctx, "tcp", key)
	}
	if err != nil {
		t.freeSlot(key)
		var pe *retryhttp.PhaseError
		if !errors.As(err, &pe) {
			err = &retryhttp.PhaseError{Phase: retryhttp.PhaseConnect, Err: err}
		}
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &conn{t: t, key: key, nc: nc}
	c.cr.Conn = nc
	size := t.ReadBufferSize
	if size <= 0 {
		size = 8 << 10
	}
	c.br = bufio.NewReaderSize(&c.cr, size)
	return c, nil
}

// freeSlot gives a connection slot of key back: to a waiter if there is one.
func (t *Transport) freeSlot(key string) {
	t.mu.Lock()
	h := t.hosts[key]
	if h == nil {
		t.mu.Unlock()
		return
	}
	if len(h.waiters) > 0 {
		ch := h.waiters[0]
		h.waiters = h.waiters[1:]
		t.mu.Unlock()
		ch <- nil // the slot stays counted in h.total for the waiter
		return
	}
	h.total--
	if h.total == 0 && len(h.idle) == 0 {
		delete(t.hosts, key)
	}
	t.mu.Unlock()
}

// discard closes c and frees its slot.
func (t *Transport) discard(c *conn) {
	c.nc.Close()
	t.freeSlot(c.key)
}

// putIdle returns a healthy connection: to a waiter, or to the idle pool if
// there is room, else it is closed.
func (t *Transport) putIdle(c *conn) {
	t.mu.Lock()
	h := t.hosts[c.key]
	if h == nil || t.closed {
		t.mu.Unlock()
		c.nc.Close()
		if h != nil {
			t.freeSlot(c.key)
		}
		return
	}
	if len(h.waiters) > 0 {
		ch := h.waiters[0]
		h.waiters = h.waiters[1:]
		t.mu.Unlock()
		c.reused = true
		ch <- c
		return
	}
	if len(h.idle) >= t.maxIdlePerHost() || (t.MaxIdleConns > 0 && t.idleTotal >= t.MaxIdleConns) {
		t.mu.Unlock()
		t.discard(c)
		return
	}
	c.idleAt = time.Now()
	h.idle = append(h.idle, c)
	t.idleTotal++
	if t.IdleConnTimeout > 0 && t.janitor == nil {
		t.janitor = time.AfterFunc(t.IdleConnTimeout, t.sweep)
	}
	t.mu.Unlock()
}

// sweep closes the connections idle for longer than IdleConnTimeout (they
// would hold a socket in CLOSE_WAIT after the server gave up on them).
func (t *Transport) sweep() {
	var old []*conn
	t.mu.Lock()
	now := time.Now()
	for key, h := range t.hosts {
		keep := h.idle[:0]
		for _, c := range h.idle {
			if now.Sub(c.idleAt) > t.IdleConnTimeout {
				old = append(old, c)
				h.total--
				t.idleTotal--
			} else {
				keep = append(keep, c)
			}
		}
		clear(h.idle[len(keep):])
		h.idle = keep
		if h.total == 0 && len(h.waiters) == 0 {
			delete(t.hosts, key)
		}
	}
	if t.idleTotal > 0 && !t.closed {
		t.janitor = time.AfterFunc(t.IdleConnTimeout/2+time.Millisecond, t.sweep)
	} else {
		t.janitor = nil
	}
	t.mu.Unlock()
	for _, c := range old {
		c.nc.Close()
	}
}

// CloseIdleConnections closes every idle connection; connections in use are
// closed when their exchange ends.
func (t *Transport) CloseIdleConnections() {
	var old []*conn
	t.mu.Lock()
	for key, h := range t.hosts {
		for _, c := range h.idle {
			old = append(old, c)
			h.total--
		}
		t.idleTotal -= len(h.idle)
		h.idle = nil
		if h.total == 0 && len(h.waiters) == 0 {
			delete(t.hosts, key)
		}
	}
	t.mu.Unlock()
	for _, c := range old {
		c.nc.Close()
	}
	t.closeIdleH2()
	if ci, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// idleCount is the number of idle connections (tests).
func (t *Transport) idleCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.idleTotal
}
