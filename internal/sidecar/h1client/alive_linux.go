package h1client

import (
	"crypto/tls"
	"net"
	"syscall"

	"github.com/retrydev/retry-operator/internal/sidecar/sockpeek"
)

// alive reports whether an idle connection can still carry a request: the
// server has not closed it (EOF) and sent nothing unsolicited. One non-blocking
// MSG_PEEK; no data is consumed.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	nc := c.nc
	tc, isTLS := nc.(*tls.Conn)
	if isTLS {
		nc = tc.NetConn() // the socket first: bytes the server sent since (a close_notify, a FIN)
	}
	if !peekQuiet(nc) {
		return false
	}
	return !isTLS || tlsQuiet(tc) // then what the TLS layer already holds
}

// peekQuiet: one non-blocking MSG_PEEK on the socket; nothing is consumed.
func peekQuiet(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	rerr := rc.Read(func(fd uintptr) bool {
		// Anything but quiet — an error, EOF, unsolicited bytes (e.g. a 408) —
		// means the connection cannot carry a request.
		alive = sockpeek.Peek(fd) == sockpeek.Nothing
		return true
	})
	return alive && rerr == nil
}
