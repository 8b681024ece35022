package sidecar

import (
	"net"
	"sync"
	"sync/atomic"
)

// cappedListener hands out at most max connections at once; a connection
// accepted beyond that is reset at once and counted (docs/operations.md#the-stats-and-admin-ports).
//
// golang.org/x/net/netutil.LimitListener caps the same number but blocks in
// Accept instead: the excess then waits in the kernel's accept queue, unseen
// and uncounted, and a scrape queued behind idle neighbours stalls rather than
// failing. Refusing at once keeps the process's cost per excess connection at
// one accept and one close, and makes the refusals visible in a metric.
type cappedListener struct {
	net.Listener
	max int64

	open    atomic.Int64 // connections handed out and not closed yet
	refused atomic.Int64 // connections reset because max were open
}

func newCappedListener(ln net.Listener, max int) *cappedListener {
	return &cappedListener{Listener: ln, max: int64(max)}
}

// Accept returns the next connection that fits under the cap, resetting those
// that do not.
func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &cappedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: no TIME_WAIT left behind per refusal
		}
		c.Close()
	}
}

// Open is the number of connections open now; Refused the number reset so far.
func (l *cappedListener) Open() int64    { return l.open.Load() }
func (l *cappedListener) Refused() int64 { return l.refused.Load() }

// cappedConn gives its slot back when it is closed, once.
type cappedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
