package sockpeek

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A loopback TCP pair: WatchHangup reports a peer that closed or reset,
// with its bytes read or not, and nothing for a peer that stays.
func TestWatchHangupSeesTheEndBehindUnreadBytes(t *testing.T) {
	for name, c := range map[string]struct {
		peer func(net.Conn)
		gone bool
	}{
		"a quiet peer has not hung up":                 {func(net.Conn) {}, false},
		"a peer that sends and stays has not hung up":  {func(p net.Conn) { io.WriteString(p, "POST / HTTP/1.1\r\n") }, false},
		"a peer that closed has hung up":               {func(p net.Conn) { p.Close() }, true},
		"a peer that sent, then closed, has hung up":   {func(p net.Conn) { io.WriteString(p, "body bytes unread"); p.Close() }, true},
		"a peer that half-closed has hung up":          {func(p net.Conn) { p.(*net.TCPConn).CloseWrite() }, true},
		"a peer that reset the connection has hung up": {func(p net.Conn) { p.(*net.TCPConn).SetLinger(0); p.Close() }, true},
	} {
		t.Run(name, func(t *testing.T) {
			local, peer := tcpPair(t)
			gone := make(chan struct{}, 2)
			if _, ok := WatchHangup(rawConn(t, local), func() { gone <- struct{}{} }); !ok {
				t.Fatal("WatchHangup: not watchable")
			}
			c.peer(peer)
			wait := 2 * time.Second
			if !c.gone {
				wait = 100 * time.Millisecond // nothing is coming: how long to be sure
			}
			select {
			case <-gone:
				if !c.gone {
					t.Fatal("reported a hang-up; the peer is still there")
				}
			case <-time.After(wait):
				if c.gone {
					t.Fatal("no hang-up reported within 2s")
				}
			}
			select {
			case <-gone:
				t.Fatal("reported twice")
			case <-time.After(20 * time.Millisecond):
			}
		})
	}
}

func TestWatchHangupReportsAPeerGoneBeforeTheWatchAndNothingAfterStop(t *testing.T) {
	local, peer := tcpPair(t)
	peer.Close()
	gone := make(chan struct{}, 1)
	if _, ok := WatchHangup(rawConn(t, local), func() { gone <- struct{}{} }); !ok {
		t.Fatal("not watchable")
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("a peer that had closed before the watch was not reported")
	}

	local, peer = tcpPair(t)
	h, _ := WatchHangup(rawConn(t, local), func() { gone <- struct{}{} })
	h.Stop()
	peer.Close()
	select {
	case <-gone:
		t.Fatal("reported after Stop")
	case <-time.After(100 * time.Millisecond):
	}
}

func rawConn(t *testing.T, c net.Conn) syscall.RawConn {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
