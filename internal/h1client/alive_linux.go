package h1client

import (
	"crypto/tls"
	"net"
	"syscall"
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
	var buf [1]byte
	alive := true
	rerr := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			alive = true // nothing to read: still open
		case err != nil, n == 0, n > 0:
			alive = false // error, EOF, or unsolicited bytes (e.g. a 408)
		}
		return true
	})
	return alive && rerr == nil
}
