package h1server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 with prior knowledge (h2c, what gRPC clients speak to a plaintext
// address) shares the listener with HTTP/1.1: a connection's first bytes
// decide (docs/sidecar.md#grpc-and-http2). Every connection begins with a
// read into its buffer, as it would for an HTTP/1.1 head, and nothing read is
// lost: an HTTP/1.1 connection is served from that buffer, an HTTP/2 one is
// handed to Server.HTTP2 with the bytes read first.
//
//	first bytes                                    served by
//	PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n               HTTP2.ServeConn (the preface is its to read)
//	PRI * HTTP/2.0\r\n\r\n + anything else         a GOAWAY(PROTOCOL_ERROR), then closed
//	anything that leaves the preface               HTTP/1.1, as without HTTP2
//
// A connection that stops inside the preface waits as an HTTP/1.1 head would:
// IdleTimeout until its first byte, ReadHeaderTimeout after it.

// h2Start is where the HTTP/2 preface leaves HTTP/1.1: a connection that
// begins with it is HTTP/2's or broken.
const h2Start = "PRI * HTTP/2.0\r\n\r\n"

// firstBytes is what sniff learnt of a connection.
type firstBytes uint8

const (
	http1       firstBytes = iota // not the HTTP/2 preface
	http2Client                   // the whole preface
	badPreface                    // h2Start, then something other than the preface
)

// sniff reads until the buffered bytes are known to begin the preface or
// not; err is the read's when the connection ended (or timed out) first.
func (c *conn) sniff() (firstBytes, error) {
	deadline := false
	defer func() {
		if deadline {
			c.nc.SetReadDeadline(time.Time{})
		}
	}()
	for {
		got := c.buf[c.r:c.w]
		n := min(len(got), len(http2.ClientPreface))
		same := 0 // bytes that agree with the preface
		for same < n && got[same] == http2.ClientPreface[same] {
			same++
		}
		if same < n {
			if same >= len(h2Start) {
				return badPreface, nil
			}
			return http1, nil
		}
		if n == len(http2.ClientPreface) {
			return http2Client, nil
		}
		if d := c.sniffTimeout(n); d > 0 {
			c.nc.SetReadDeadline(time.Now().Add(d))
			deadline = true
		}
		if c.w == len(c.buf) { // a buffer shorter than the preface: never, see handOffNow
			return http1, nil
		}
		m, err := c.nc.Read(c.buf[c.w:])
		c.w += m
		if err != nil && m == 0 {
			return http1, err
		}
	}
}

// sniffTimeout is the read deadline while n bytes of a connection are known.
func (c *conn) sniffTimeout(n int) time.Duration {
	if n == 0 {
		return c.srv.IdleTimeout
	}
	return c.srv.ReadHeaderTimeout
}

// serveFirst serves a connection whose first bytes are buffered: over HTTP/2,
// refused, or left for HTTP/1.1 (reported false).
func (c *conn) serveFirst(fb firstBytes) (served bool) {
	switch fb {
	case http2Client:
		c.serveHTTP2()
		return true
	case badPreface:
		c.refusePreface()
		return true
	}
	return false
}

// refusePreface answers a broken preface as RFC 9113 §3.4 says: a connection
// error of type PROTOCOL_ERROR, that is a GOAWAY, and the connection closes.
func (c *conn) refusePreface() {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = http2.NewFramer(c.nc, nil).WriteGoAway(0, http2.ErrCodeProtocol, []byte("bad connection preface"))
	c.hangup.stop()
	c.srv.track(c, false)
	c.nc.Close()
}

// serveHTTP2 hands the connection, the bytes read first, to Server.HTTP2. Its
// streams' contexts derive from the connection's (ConnContext's, then
// cancelled by the hang-up watch); its states reach Shutdown through the
// fallback's ConnState hook (watchFallback), which HTTP2 calls: a connection
// without a stream in flight is idle and closed by Shutdown.
func (c *conn) serveHTTP2() {
	s := c.srv
	pc := &prefixConn{Conn: c.nc, c: c}
	pc.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(append([]byte(nil), c.buf[c.r:c.w]...)), c.nc), http2ReadBuffer)
	c.buf, c.bw = nil, nil
	ctx := context.Background()
	if s.connContext != nil {
		ctx = s.connContext(ctx, c.nc)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.hangup.follow(cancel)
	s.HTTP2.ServeConn(pc, &http2.ServeConnOpts{Context: ctx, BaseConfig: s.http2Base(), Handler: s.handler})
	c.hangup.stop()
	s.track(c, false)
	c.nc.Close()
}

// http2ReadBuffer is the read buffer of an HTTP/2 connection from the app:
// a unary gRPC call's frames (HEADERS, DATA, WINDOW_UPDATE, PING) come
// together and are read in one system call instead of two each.
const http2ReadBuffer = 4 << 10

// http2Base is the net/http.Server HTTP2 reads its settings from: the
// fallback's ConnState hook and error log, and HTTP2MaxHeaderBytes as the
// bound of a header list (SETTINGS_MAX_HEADER_LIST_SIZE).
func (s *Server) http2Base() *http.Server {
	s.http2BaseOnce.Do(func() {
		s.http2BaseSrv = &http.Server{ConnState: s.Fallback.ConnState, ErrorLog: s.Fallback.ErrorLog,
			MaxHeaderBytes: s.HTTP2MaxHeaderBytes}
	})
	return s.http2BaseSrv
}
