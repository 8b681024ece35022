// Package h1server serves an app's plain HTTP/1.1 requests to the sidecar
// without net/http.Server's per-request machinery, and hands every connection
// whose next request falls outside a strict subset of HTTP/1.1 to a
// net/http.Server, unchanged: what net/http.Server rejects is rejected by
// net/http.Server. Why, and the subset: docs/performance.md#the-app-side-server.
package h1server

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Server serves Handler on a listener. The zero value is not usable: Fallback
// is required, and Handler unless HandOffAll.
//
// Every connection it accepts is watched for a hang-up from then on, and
// tracked for Shutdown, whether the fast path or Fallback serves it.
type Server struct {
	// Handler answers the requests of the subset.
	Handler http.Handler
	// Fallback serves the connections handed off (it must not be started by
	// the caller: Serve runs it, and wraps its ConnContext, ConnState and
	// Handler, see watchFallback); its Handler is normally the same as Handler.
	Fallback *http.Server
	// HandOffAll hands every connection to Fallback as soon as it is
	// accepted: net/http.Server serves everything, with the same hang-up
	// watch and Shutdown.
	HandOffAll bool
	// ReadHeaderTimeout bounds the reading of a request head once its first
	// byte arrived; IdleTimeout bounds the wait for the next request.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// Log receives panics of the Handler other than http.ErrAbortHandler.
	Log *slog.Logger
	// HTTP2, if set, serves the connections that begin with the HTTP/2
	// client preface (h2c with prior knowledge, see h2c.go) with Fallback's
	// Handler; nil leaves them to Fallback, which refuses them.
	HTTP2 *http2.Server
	// HTTP2MaxHeaderBytes bounds the header list of an HTTP/2 request
	// (0: net/http's default, 1 MiB).
	HTTP2MaxHeaderBytes int

	// connContext and handler are Fallback's own, before watchFallback.
	connContext   func(context.Context, net.Conn) context.Context
	handler       http.Handler
	http2BaseOnce sync.Once
	http2BaseSrv  *http.Server

	handoff  handoffListener
	mu       sync.Mutex
	conns    map[*conn]struct{}
	ln       net.Listener
	shutdown atomic.Bool
	served   atomic.Int64 // requests served here (not handed off), for tests
}

// Served is the number of requests this server answered itself.
func (s *Server) Served() int64 { return s.served.Load() }

// Serve accepts connections on ln until it is closed (by Shutdown or Close).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.conns = map[*conn]struct{}{}
	s.handoff = handoffListener{conns: make(chan net.Conn), done: make(chan struct{}), addr: ln.Addr()}
	s.mu.Unlock()
	s.watchFallback()
	// The fallback serves until the hand-off listener closes with this one;
	// its error then says only that.
	go func() { _ = s.Fallback.Serve(&s.handoff) }()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond) // out of file descriptors: as net/http does
				continue
			}
			return err
		}
		c := newConn(s, nc)
		if !s.track(c, true) {
			c.hangup.stop()
			nc.Close()
			return http.ErrServerClosed
		}
		if s.HandOffAll {
			go c.handOffNow()
			continue
		}
		go c.serve()
	}
}

// track adds or removes a connection; adding fails once shut down.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.shutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown stops accepting, closes the connections without a request in
// flight (waiting for one, with part of a head or nothing at all, here or in
// the fallback server), lets requests in flight finish (their connections
// close after the response) and waits for them, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return s.Fallback.Shutdown(ctx)
}

// Close closes every connection at once, here and in the fallback server.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return s.Fallback.Close()
}

func (s *Server) stop() {
	if s.shutdown.Swap(true) {
		return
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	s.handoff.close()
}

// closeIdle closes the connections without a request in flight and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

// handoffListener is the listener the fallback net/http.Server accepts the
// handed-off connections from.
type handoffListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// give hands a connection to the fallback server; false once it is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) close()         { l.once.Do(func() { close(l.done) }) }
func (l *handoffListener) Close() error   { l.close(); return nil }
func (l *handoffListener) Addr() net.Addr { return l.addr }

// prefixConn is a handed-off connection: the bytes already read come first.
type prefixConn struct {
	net.Conn
	prefix []byte
	c      *conn // its hang-up watch and state, for watchFallback
	// r, if set, is what it is read through (prefix first, then Conn):
	// HTTP/2's framer reads each frame's 9-byte header and its payload
	// with a read each, two system calls per frame unbuffered.
	r *bufio.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.r != nil {
		return c.r.Read(p)
	}
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close a handed-off connection before closing
// it, so an app reads an error response (a 400) before the reset.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
