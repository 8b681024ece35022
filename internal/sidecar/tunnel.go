package sidecar

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// connect tunnels a CONNECT request unchanged: dial the authority, answer 200,
// then relay bytes both ways until either side is done. Nothing inside the
// tunnel (TLS, usually) can be seen or retried. A tunnel uses one goroutine
// besides the handler's own.
//
// A tunnel to a host whose policy has a plaintext upstream is terminated when
// the app speaks HTTP/2 in it (a gRPC client behind a proxy):
// each stream is then forwarded as the listener's own are, under the policy
// (docs/sidecar.md#grpc-and-http2).
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	client, upstream, br, ok := p.openTunnel(w, r)
	if !ok {
		return
	}
	p.Metrics.tunnels.Inc()
	p.Metrics.tunnelsActive.Inc()
	t := p.tunnels.add(client, upstream)
	defer func() {
		p.tunnels.remove(t)
		p.Metrics.tunnelsActive.Dec()
	}()
	if p.terminable(r) && sniffTunnel(client, br) {
		upstream.Close()
		p.h2.serveTunnel(r.Context(), client, br, p)
		client.Close()
		return
	}
	if err := forwardBuffered(br, upstream); err != nil {
		client.Close()
		upstream.Close()
		return
	}

	done := make(chan struct{})
	go func() {
		relay(upstream, client)
		close(done)
	}()
	relay(client, upstream)
	<-done
	client.Close()
	upstream.Close()
}

// terminable reports whether a CONNECT tunnel may be terminated: the app-side
// HTTP/2 server is there, and the target has a policy whose upstream is
// plaintext (with tls, the app's bytes in the tunnel are its own TLS).
func (p *Proxy) terminable(r *http.Request) bool {
	if p.h2 == nil || p.grpc == nil || p.Route == nil || p.Route(r) == nil {
		return false
	}
	return tlsUpstream(p.grpc.reloader, p.grpc.routing, r) == nil
}

// tunnelSniffTimeout bounds the wait for an app's first bytes in a tunnel
// that may be terminated; an app that has said nothing by then gets the
// opaque tunnel (a protocol where the server speaks first).
const tunnelSniffTimeout = 10 * time.Second

// sniffTunnel reports whether the app's first bytes in a tunnel are the
// HTTP/2 client preface. They stay in br, read by whichever serves the tunnel.
func sniffTunnel(client net.Conn, br *bufio.Reader) bool {
	_ = client.SetReadDeadline(time.Now().Add(tunnelSniffTimeout))
	defer client.SetReadDeadline(time.Time{})
	for n := 1; n <= len(http2.ClientPreface); n++ {
		b, err := br.Peek(n)
		if err != nil || b[n-1] != http2.ClientPreface[n-1] {
			return false
		}
	}
	return true
}

// openTunnel dials the CONNECT target, takes the client connection over and
// answers 200; br holds what the client sent after the CONNECT. When it
// cannot, it answers the error itself (while it still can) and reports false,
// with both connections closed.
func (p *Proxy) openTunnel(w http.ResponseWriter, r *http.Request) (client, upstream net.Conn, br *bufio.Reader, ok bool) {
	target := r.Host
	if _, port, err := net.SplitHostPort(target); err != nil || port == "" {
		plainError(w, http.StatusBadRequest, "retry-sidecar: CONNECT needs host:port\n")
		return nil, nil, nil, false
	}
	if p.Self.targets(target, "") {
		loopError(w)
		return nil, nil, nil, false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		plainError(w, http.StatusInternalServerError, "retry-sidecar: CONNECT is not supported on this connection\n")
		return nil, nil, nil, false
	}
	upstream, err := p.dialTunnel(r, target)
	if errors.Is(err, errLoop) {
		loopError(w)
		return nil, nil, nil, false
	}
	if err != nil {
		p.Log.Debug("CONNECT dial failed", "method", r.Method, "outcome", "upstream-error")
		plainError(w, http.StatusBadGateway, "retry-sidecar: CONNECT target unreachable\n")
		return nil, nil, nil, false
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return nil, nil, nil, false
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		upstream.Close()
		return nil, nil, nil, false
	}
	return client, upstream, brw.Reader, true
}

// dialTunnel dials a CONNECT target. A target with a policy (hosts: a
// host:port such as api.example:443) gets its connectTimeout, as its requests
// would; the tunnel is opaque, so nothing else of the policy can apply.
func (p *Proxy) dialTunnel(r *http.Request, target string) (net.Conn, error) {
	ctx := r.Context()
	if p.Route != nil {
		if pol := p.Route(r); pol != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, pol.ConnectTimeout())
			defer cancel()
		}
	}
	return p.Dial(ctx, "tcp", target)
}

// forwardBuffered sends upstream the bytes the client sent that br holds
// already (a TLS hello pipelined behind the CONNECT); the relay reads the
// client connection itself from then on.
func forwardBuffered(br *bufio.Reader, upstream net.Conn) error {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := upstream.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// relay copies src to dst, then half-closes dst so the other side sees EOF while
// the opposite direction may still be sending.
func relay(dst, src net.Conn) {
	bp := bufPool.Get().(*[]byte)
	_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
	bufPool.Put(bp)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// tunnels tracks open tunnels: http.Server.Shutdown does not see hijacked
// connections, so the drain waits for them here and closes what is left.
type tunnels struct {
	mu   sync.Mutex
	open map[*tunnel]struct{}
	wg   sync.WaitGroup
}

type tunnel struct{ a, b net.Conn }

func (ts *tunnels) add(a, b net.Conn) *tunnel {
	t := &tunnel{a, b}
	ts.mu.Lock()
	if ts.open == nil {
		ts.open = map[*tunnel]struct{}{}
	}
	ts.open[t] = struct{}{}
	ts.wg.Add(1)
	ts.mu.Unlock()
	return t
}

func (ts *tunnels) remove(t *tunnel) {
	ts.mu.Lock()
	delete(ts.open, t)
	ts.mu.Unlock()
	ts.wg.Done()
}

// drain waits for the open tunnels to end until ctx ends, then closes the rest.
// It reports whether every tunnel ended on its own.
func (ts *tunnels) drain(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { ts.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	ts.mu.Lock()
	for t := range ts.open {
		t.a.Close()
		t.b.Close()
	}
	ts.mu.Unlock()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	return false
}
