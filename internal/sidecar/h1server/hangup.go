package h1server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/retrydev/retry-operator/internal/sidecar/sockpeek"
)

// hangup is the watch of one app connection, started when the connection is
// accepted and kept until it closes, whichever server serves it. Once the app
// has closed the connection (FIN or reset, even with request bytes still
// unread) the context it follows is cancelled: the request in flight, or the
// next one already read, reaches the handler cancelled (it sends nothing and
// is counted canceled), and nothing after it is served
// (docs/performance.md#the-app-side-server). The fast path points the watch
// at each request's context in turn; for net/http it follows the
// connection's context, from which every request's derives.
type hangup struct {
	reg    sockpeek.Hangup
	mu     sync.Mutex
	gone   bool
	ended  bool // a request ended after the hang-up: serve no more
	cancel context.CancelFunc
}

func (h *hangup) start(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		h.reg, _ = sockpeek.WatchHangup(rc, h.fire)
	}
}

// fire is called once the app hung up.
func (h *hangup) fire() {
	h.mu.Lock()
	h.gone = true
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// follow makes a hang-up call cancel from now on (nil: nothing) and reports
// whether the app is gone already; cancel has then been called.
func (h *hangup) follow(cancel context.CancelFunc) (gone bool) {
	h.mu.Lock()
	h.cancel = cancel
	gone = h.gone
	h.mu.Unlock()
	if gone && cancel != nil {
		cancel()
	}
	return gone
}

// requestEnded is called when a request's handler returned, with whether
// its context had ended (net/http's own read may notice a hang-up first); it
// reports whether the app is gone, and then no other request may follow.
func (h *hangup) requestEnded(cancelled bool) (gone bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = h.gone || cancelled
	h.ended = h.ended || h.gone
	return h.gone
}

// servesNoMore: a request already ended after the hang-up.
func (h *hangup) servesNoMore() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// stop ends the watch; the connection is closing or no longer served.
func (h *hangup) stop() { h.reg.Stop() }

type connKey struct{}

// watchFallback hooks the fallback net/http.Server into the connections
// handed to it: each one's requests derive from a context its hang-up
// cancels, a request read after a hang-up (or after Shutdown closed the
// connection) is dropped before the handler, and its state tells Shutdown
// whether a request is in flight. Its own ConnContext and ConnState, if
// any, still run and see the accepted connection.
func (s *Server) watchFallback() {
	f := s.Fallback
	connContext, connState, handler := f.ConnContext, f.ConnState, f.Handler
	if handler == nil {
		handler = http.DefaultServeMux
	}
	s.connContext, s.handler = connContext, handler
	f.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		pc, ok := nc.(*prefixConn)
		if !ok { // not from Serve: served as it is
			if connContext != nil {
				ctx = connContext(ctx, nc)
			}
			return ctx
		}
		if connContext != nil {
			ctx = connContext(ctx, pc.Conn)
		}
		ctx, cancel := context.WithCancel(ctx)
		pc.c.fallbackCancel = cancel
		pc.c.hangup.follow(cancel)
		return context.WithValue(ctx, connKey{}, pc.c)
	}
	f.ConnState = func(nc net.Conn, st http.ConnState) {
		pc, ok := nc.(*prefixConn)
		if !ok {
			if connState != nil {
				connState(nc, st)
			}
			return
		}
		c := pc.c
		switch st {
		case http.StateActive:
			c.state.CompareAndSwap(stateIdle, stateActive)
		case http.StateIdle:
			c.state.CompareAndSwap(stateActive, stateIdle)
		case http.StateHijacked:
			c.hangup.stop()
			s.track(c, false)
		case http.StateClosed:
			c.hangup.stop()
			if c.fallbackCancel != nil {
				c.fallbackCancel()
			}
			s.track(c, false)
		}
		if connState != nil {
			connState(pc.Conn, st)
		}
	}
	f.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*conn)
		if c == nil {
			handler.ServeHTTP(w, r)
			return
		}
		if c.state.Load() == stateClosed || c.hangup.servesNoMore() {
			// Closed by Shutdown, or pipelined behind a request the app
			// abandoned: dropped, the connection closes.
			panic(http.ErrAbortHandler)
		}
		defer func() { c.hangup.requestEnded(r.Context().Err() != nil) }()
		handler.ServeHTTP(w, r)
	})
}
