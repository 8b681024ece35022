package sockpeek

import (
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Hangup is a registration of WatchHangup; the zero value watches nothing.
type Hangup struct{ id uint64 }

// WatchHangup calls gone once, on a goroutine of its own, when the peer of
// the TCP socket rc closes its sending side (FIN) or resets the connection,
// whether or not bytes it sent wait unread: a peek sees those bytes and not
// the end behind them, epoll's EPOLLRDHUP sees the end. It reports false when
// the socket cannot be watched (then gone is never called).
//
// One epoll set and one goroutine serve the whole process: a registration
// costs one epoll_ctl and nothing while the peer stays; the kernel drops it
// when the socket is closed. A peer that had already hung up when the watch
// started is reported at once.
func WatchHangup(rc syscall.RawConn, gone func()) (Hangup, bool) {
	w, err := hangupWatcher()
	if err != nil {
		return Hangup{}, false
	}
	w.mu.Lock()
	w.next++
	id := w.next
	w.gone[id] = gone
	w.mu.Unlock()
	var ctlErr error
	// Inside Control the descriptor cannot be closed and reused under us.
	err = rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		ctlErr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || ctlErr != nil {
		Hangup{id}.Stop()
		return Hangup{}, false
	}
	return Hangup{id}, true
}

// Stop forgets the registration before the socket is closed. A hang-up that
// raced Stop may still call gone once, concurrently.
func (h Hangup) Stop() {
	if h.id == 0 {
		return
	}
	w, _ := hangupWatcher()
	w.mu.Lock()
	delete(w.gone, h.id)
	w.mu.Unlock()
}

type watcher struct {
	epfd int
	mu   sync.Mutex
	next uint64
	gone map[uint64]func()
}

var hangupWatcher = sync.OnceValues(func() (*watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &watcher{epfd: epfd, gone: map[uint64]func(){}}
	go w.dispatch()
	return w, nil
})

// dispatch waits for hang-ups for ever: the epoll set lives as long as the
// process. The wait blocks one thread, not a P.
func (w *watcher) dispatch() {
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // the set is never closed: not reached
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			w.mu.Lock()
			gone := w.gone[id]
			delete(w.gone, id)
			w.mu.Unlock()
			if gone != nil {
				gone()
			}
		}
	}
}
