package sidecar

import (
	"bufio"
	"context"
	stdlog "log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// appHTTP2 is the app side's HTTP/2 server (docs/sidecar.md#grpc-and-http2):
// one http2.Server for every connection that speaks HTTP/2 with prior
// knowledge, on --listen, --transparent-listen and inside the CONNECT
// tunnels the sidecar terminates. Its bounds hold per connection whatever
// the app sends:
//
//	streams at once   appMaxStreams; a stream past it is refused (REFUSED_STREAM)
//	header list       grpcMaxHeaderBytes (SETTINGS_MAX_HEADER_LIST_SIZE)
//	frame             appMaxFrameSize (SETTINGS_MAX_FRAME_SIZE)
//	request bytes     appStreamWindow per stream and appConnWindow per
//	buffered          connection (flow control: the app sends no more until
//	                  the upstream took them)
type appHTTP2 struct {
	srv *http2.Server
	// base holds the settings http2 reads from a net/http.Server for the
	// tunnels (the listeners' come from h1server).
	base *http.Server
	// shut is never served: its Shutdown sends every connection of srv a
	// GOAWAY (http2.ConfigureServer ties them).
	shut *http.Server
}

const (
	appMaxStreams   = 128
	appMaxFrameSize = 64 << 10
	appStreamWindow = 256 << 10
	appConnWindow   = 1 << 20
)

func newAppHTTP2(errLog *stdlog.Logger) *appHTTP2 {
	a := &appHTTP2{
		srv: &http2.Server{
			MaxConcurrentStreams:         appMaxStreams,
			MaxReadFrameSize:             appMaxFrameSize,
			MaxUploadBufferPerStream:     appStreamWindow,
			MaxUploadBufferPerConnection: appConnWindow,
			IdleTimeout:                  appIdleTimeout,
		},
		base: &http.Server{MaxHeaderBytes: grpcMaxHeaderBytes, ErrorLog: errLog},
		shut: &http.Server{ErrorLog: errLog},
	}
	if err := http2.ConfigureServer(a.shut, a.srv); err != nil {
		panic(err) // only for a TLS configuration, which shut has none of
	}
	return a
}

// goAway tells every HTTP/2 connection that no new stream will be served:
// the streams in flight finish, then each connection closes.
func (a *appHTTP2) goAway() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = a.shut.Shutdown(ctx)
}

// serveTunnel serves a terminated CONNECT tunnel whose app spoke HTTP/2: c,
// the bytes br holds first, each stream to h within ctx.
func (a *appHTTP2) serveTunnel(ctx context.Context, c net.Conn, br *bufio.Reader, h http.Handler) {
	a.srv.ServeConn(&bufferedConn{Conn: c, r: br}, &http2.ServeConnOpts{Context: ctx, BaseConfig: a.base, Handler: h})
}

// bufferedConn reads through r, which may hold bytes read from Conn already.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
