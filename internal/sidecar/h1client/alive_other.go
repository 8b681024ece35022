//go:build !linux

package h1client

import "crypto/tls"

// alive: without a cheap non-blocking peek, only buffered bytes are checked
// (and, for TLS, what the TLS layer holds).
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if tc, ok := c.nc.(*tls.Conn); ok {
		return tlsQuiet(tc)
	}
	return true
}
