package h1server

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/retrydev/retry-operator/internal/sockpeek"
)

// watchDelay is how long a request runs before its app connection is watched
// for a disconnect. net/http.Server watches from the start (a read per
// request); most requests to a sidecar end sooner than this, and a request
// that waits (for an upstream, a backoff, a Retry-After) learns within
// watchDelay that its app went away (docs/performance.md#the-app-side-server).
const watchDelay = 5 * time.Millisecond

// watcher cancels a request's context when the app closes its connection
// while the request runs. It watches only once the request body has been read
// whole (until then the body's own reads see a disconnect) and watchDelay has
// passed; a byte of a pipelined next request ends the watch (the app is there).
type watcher struct {
	nc    net.Conn
	rc    syscall.RawConn // nil: not watchable
	timer *time.Timer
	done  chan struct{}

	mu                             sync.Mutex
	armed, due, bodyDone, watching bool
	cancel                         context.CancelFunc
}

func (w *watcher) init(nc net.Conn) {
	w.nc = nc
	if sc, ok := nc.(syscall.Conn); ok && sockpeek.Supported {
		w.rc, _ = sc.SyscallConn()
	}
	w.done = make(chan struct{}, 1)
}

// arm starts the delay for a request; cancel ends its context.
func (w *watcher) arm(cancel context.CancelFunc, bodyDone bool) {
	if w.rc == nil {
		return
	}
	w.mu.Lock()
	w.armed, w.due, w.bodyDone, w.cancel = true, false, bodyDone, cancel
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(watchDelay, w.fire)
	} else {
		w.timer.Reset(watchDelay)
	}
}

func (w *watcher) fire() {
	w.mu.Lock()
	if w.armed {
		w.due = true
		w.startLocked()
	}
	w.mu.Unlock()
}

// bodyEOF is called when the request body has been read whole.
func (w *watcher) bodyEOF() {
	if w.rc == nil {
		return
	}
	w.mu.Lock()
	if w.armed {
		w.bodyDone = true
		w.startLocked()
	}
	w.mu.Unlock()
}

func (w *watcher) startLocked() {
	if w.due && w.bodyDone && !w.watching {
		w.watching = true
		go w.watch(w.cancel)
	}
}

// disarm ends the watch of the request that finished; the connection is
// then the server's alone again.
func (w *watcher) disarm() {
	if w.rc == nil {
		return
	}
	w.timer.Stop()
	w.mu.Lock()
	watching := w.watching
	w.armed, w.watching = false, false
	w.mu.Unlock()
	if watching {
		w.nc.SetReadDeadline(aLongTimeAgo) // wakes the watch
		<-w.done
		w.nc.SetReadDeadline(time.Time{})
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// watch waits until the connection is readable: end of stream or an error
// means the app went away; data means a pipelined request (the app is
// there). The read deadline set by disarm ends it.
func (w *watcher) watch(cancel context.CancelFunc) {
	defer func() { w.done <- struct{}{} }()
	gone := false
	err := w.rc.Read(func(fd uintptr) bool {
		switch sockpeek.Peek(fd) {
		case sockpeek.Nothing, sockpeek.Interrupted:
			return false // wait until readable
		case sockpeek.Closed:
			gone = true
		}
		return true
	})
	if err == nil && gone {
		cancel()
	}
}
