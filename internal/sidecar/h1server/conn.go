package h1server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Connection states, for Shutdown: an idle connection waits for its next
// request and may be closed; an active one is finished first.
const (
	stateActive int32 = iota
	stateIdle
	stateClosed
)

const (
	headBufSize = 4 << 10 // a longer head is handed off
	// maxDiscard is how much of a request body the handler left unread is read
	// and dropped to keep the connection (net/http's figure); more closes it.
	maxDiscard = 256 << 10
)

// conn is one app connection, served here or handed off.
type conn struct {
	srv    *Server
	nc     net.Conn
	remote string
	state  atomic.Int32
	hangup hangup
	buf    []byte // unread bytes are buf[r:w]
	r, w   int
	bw     *bufio.Writer
	res    response
	// unreadBody: the last request's body was not read to its end, so the
	// app may still be sending it when the connection closes.
	unreadBody bool
	// afterPOST: the last request was a POST; see skipSloppyCRLF.
	afterPOST bool
	tmpl      http.Request // zero: WithContext copies it into each request
	// fallbackCancel ends the context of a handed-off connection.
	fallbackCancel context.CancelFunc
}

// newConn starts the connection's hang-up watch: from here on, whichever
// server reads its requests, an app that hangs up cancels them.
func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc}
	c.state.Store(stateIdle)
	c.hangup.start(nc)
	return c
}

// serve reads and answers requests until the connection ends or a request
// outside the subset hands it to the fallback server.
func (c *conn) serve() {
	c.remote = c.nc.RemoteAddr().String()
	c.buf = make([]byte, headBufSize)
	c.bw = bufio.NewWriterSize(c.nc, 4<<10)
	handedOff := false
	defer func() {
		if !handedOff {
			c.srv.track(c, false)
			c.close()
		}
	}()
	if c.srv.HTTP2 != nil {
		fb, err := c.sniff()
		if err != nil {
			return
		}
		if handedOff = c.serveFirst(fb); handedOff {
			return
		}
	}
	for {
		h, v, err := c.readHead()
		if err != nil {
			return
		}
		if v == handOff {
			handedOff = c.handOff()
			return
		}
		if !c.serveOne(&h) || c.srv.shutdown.Load() {
			return
		}
	}
}

// readHead waits for the next request head, with the idle timeout until its
// first byte (a stray CRLF after a POST is not one) and the header timeout
// after it. A request already buffered (pipelined) is parsed without
// touching the connection. Until a head is complete the connection counts as
// idle: Shutdown may close it.
func (c *conn) readHead() (h head, v verdict, err error) {
	c.state.Store(stateIdle)
	if c.srv.shutdown.Load() {
		return h, handOff, net.ErrClosed
	}
	deadline, headBytes := false, false
	defer func() {
		if deadline {
			c.nc.SetReadDeadline(time.Time{})
		}
	}()
	for {
		if c.afterPOST && c.w > c.r {
			c.skipSloppyCRLF()
		}
		switch {
		case c.w > c.r && !c.afterPOST:
			h, n, v := parseHead(c.buf[c.r:c.w])
			if v == accepted || v == handOff || c.w-c.r == len(c.buf) {
				if !c.state.CompareAndSwap(stateIdle, stateActive) {
					return h, handOff, net.ErrClosed // closed by Shutdown
				}
				if v == accepted {
					c.r += n
					return h, v, nil
				}
				return h, handOff, nil // outside the subset, or too long for it
			}
			if !headBytes && c.srv.ReadHeaderTimeout > 0 {
				c.nc.SetReadDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
				deadline = true
			}
			headBytes = true
		case !deadline && c.srv.IdleTimeout > 0:
			c.nc.SetReadDeadline(time.Now().Add(c.srv.IdleTimeout))
			deadline = true
		}
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		n, err := c.nc.Read(c.buf[c.w:])
		c.w += n
		if err != nil && n == 0 {
			return h, handOff, err
		}
	}
}

// skipSloppyCRLF drops the CR and LF bytes among the first four after a POST,
// as net/http.Server does for old clients that end a body with an extra CRLF
// (RFC 9112 §2.2), and clears afterPOST. While fewer than four bytes, all CR
// or LF, are buffered it leaves afterPOST set: the next byte decides.
func (c *conn) skipSloppyCRLF() {
	avail := c.buf[c.r:c.w]
	n := 0
	for n < len(avail) && n < 4 && (avail[n] == '\r' || avail[n] == '\n') {
		n++
	}
	if n == len(avail) && n < 4 {
		return
	}
	c.r += n
	c.afterPOST = false
}

// handOffNow gives a connection to the fallback server, or to HTTP2 when its
// first bytes are the HTTP/2 preface (only those are read first).
func (c *conn) handOffNow() {
	if c.srv.HTTP2 != nil {
		c.buf = make([]byte, len(http2.ClientPreface))
		fb, err := c.sniff()
		if err != nil {
			c.hangup.stop()
			c.srv.track(c, false)
			c.nc.Close()
			return
		}
		if c.serveFirst(fb) {
			return
		}
	}
	if !c.handOff() {
		c.hangup.stop()
		c.nc.Close()
	}
}

// handOff gives the connection, with the bytes already read, to the fallback
// net/http.Server. It reports whether the fallback took it.
func (c *conn) handOff() bool {
	var prefix []byte
	if c.r < c.w {
		prefix = append([]byte(nil), c.buf[c.r:c.w]...)
	}
	c.buf, c.bw = nil, nil
	c.hangup.follow(nil)
	c.state.Store(stateIdle) // until net/http reads a request: see watchFallback
	if !c.srv.handoff.give(&prefixConn{Conn: c.nc, prefix: prefix, c: c}) {
		c.srv.track(c, false)
		return false
	}
	return true
}

// rstAvoidanceDelay is how long a connection whose request body was left
// unread stays half-closed before it is closed (net/http's figure): closing
// with unread bytes would send a reset, and the app's client could lose the
// response it has not read yet (an early 413, say).
const rstAvoidanceDelay = 500 * time.Millisecond

// close closes the connection, after a half-close and rstAvoidanceDelay if
// the app may still be sending a request body.
func (c *conn) close() {
	c.hangup.stop()
	if c.unreadBody {
		c.bw.Flush()
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			time.Sleep(rstAvoidanceDelay)
		}
	}
	c.nc.Close()
}

// serveOne answers one request and reports whether the connection stays open
// for the next.
func (c *conn) serveOne(h *head) (keepAlive bool) {
	// A root context: the request ends before its connection does, so a
	// connection-wide parent would only add a registration per request. The
	// hang-up watch cancels it directly; if the app is gone already, the
	// handler gets it cancelled. As with net/http, it ends with the handler.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.hangup.follow(cancel)
	req := c.tmpl.WithContext(ctx)
	c.afterPOST = h.method == http.MethodPost
	req.Method, req.URL, req.RequestURI = h.method, h.url, h.target
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/1.1", 1, 1
	req.Header, req.Host, req.RemoteAddr, req.Close = h.header, h.host, c.remote, h.close
	req.ContentLength = h.contentLength
	req.Body = http.NoBody
	var b *body
	if h.contentLength > 0 {
		b = &body{c: c, remaining: h.contentLength}
		b.unread.Store(h.contentLength)
		req.Body = b
	}
	c.res.reset(c, req, b)
	aborted := c.callHandler(req)
	c.hangup.follow(nil)
	gone := c.hangup.requestEnded(false) // only the watch cancels ctx
	c.srv.served.Add(1)
	if aborted {
		c.bw.Flush() // what the handler wrote before aborting, short of its end
		return false
	}
	c.res.finish()
	if gone {
		return false // nothing pipelined behind is served
	}
	if b != nil && !b.discard() {
		c.unreadBody = true
		return false
	}
	return c.res.keepAlive()
}

// callHandler runs the handler and reports whether it panicked (an
// http.ErrAbortHandler included): the response is then cut off.
func (c *conn) callHandler(req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if err, _ := v.(error); !errors.Is(err, http.ErrAbortHandler) && c.srv.Log != nil {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.Log.Error("handler panicked", "panic", v, "stack", string(buf))
			}
		}
	}()
	c.srv.Handler.ServeHTTP(&c.res, req)
	return false
}

// read reads request body bytes: first those already buffered, then straight
// from the connection.
func (c *conn) read(p []byte) (int, error) {
	if c.r < c.w {
		n := copy(p, c.buf[c.r:c.w])
		c.r += n
		return n, nil
	}
	return c.nc.Read(p)
}

// errBodyClosed is returned by a read of a request body after the handler
// returned (net/http's wording).
var errBodyClosed = errors.New("http: invalid Read on closed Body")

// body is a request body of known length. It may be read by another
// goroutine than the handler's (an upstream client writing it), so it is
// locked, and closed for good once the handler returned.
type body struct {
	mu        sync.Mutex
	c         *conn
	remaining int64
	unread    atomic.Int64 // remaining, readable without the lock (by the response)
	err       error
	closed    bool
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.read(p)
	b.remaining -= int64(n)
	b.unread.Store(b.remaining)
	switch {
	case b.remaining == 0:
		if n > 0 {
			return n, nil // EOF on the next read, as net/http's body
		}
		return 0, io.EOF
	case errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// Close is a no-op for the handler (net/http's body reads on after a Close by
// the server's own discard); the server closes the body after the handler.
func (b *body) Close() error { return nil }

// discard closes the body after the handler and reads what it left unread,
// up to maxDiscard; it reports whether the connection can carry the next
// request.
func (b *body) discard() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.err != nil || b.remaining > maxDiscard {
		return false
	}
	var scratch [4 << 10]byte
	for b.remaining > 0 {
		if _, err := b.readLocked(scratch[:]); err != nil {
			return false
		}
	}
	return true
}
