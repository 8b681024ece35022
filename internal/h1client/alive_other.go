//go:build !linux

package h1client

// alive: without a cheap non-blocking peek, only buffered bytes are checked.
func (c *conn) alive() bool { return c.br.Buffered() == 0 }
