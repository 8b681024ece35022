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
)

// connect tunnels a CONNECT request unchanged: dial the authority, answer 200,
// then relay bytes both ways until either side is done. Nothing inside the
// tunnel (TLS, usually) can be seen or retried. A tunnel uses one goroutine
// besides the handler's own.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	client, upstream, ok := p.openTunnel(w, r)
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

// openTunnel dials the CONNECT target, takes the client connection over and
// answers 200. When it cannot, it answers the error itself (while it still
// can) and reports false, with both connections closed.
func (p *Proxy) openTunnel(w http.ResponseWriter, r *http.Request) (client, upstream net.Conn, ok bool) {
	target := r.Host
	if _, port, err := net.SplitHostPort(target); err != nil || port == "" {
		plainError(w, http.StatusBadRequest, "retry-sidecar: CONNECT needs host:port\n")
		return nil, nil, false
	}
	if p.Self.targets(target, "") {
		loopError(w)
		return nil, nil, false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		plainError(w, http.StatusInternalServerError, "retry-sidecar: CONNECT is not supported on this connection\n")
		return nil, nil, false
	}
	upstream, err := p.dialTunnel(r, target)
	if errors.Is(err, errLoop) {
		loopError(w)
		return nil, nil, false
	}
	if err != nil {
		p.Log.Debug("CONNECT dial failed", "method", r.Method, "outcome", "upstream-error")
		plainError(w, http.StatusBadGateway, "retry-sidecar: CONNECT target unreachable\n")
		return nil, nil, false
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return nil, nil, false
	}
	if err := answerTunnel(client, brw, upstream); err != nil {
		client.Close()
		upstream.Close()
		return nil, nil, false
	}
	return client, upstream, true
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

// answerTunnel answers 200 on the hijacked client connection and forwards the
// bytes the client sent right behind the CONNECT (a pipelined TLS hello), which
// are already in the server's buffer.
func answerTunnel(client net.Conn, brw *bufio.ReadWriter, upstream net.Conn) error {
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return err
	}
	if n := brw.Reader.Buffered(); n > 0 { //nolint:staticcheck // Buffered is ambiguous on a bufio.ReadWriter
		b, _ := brw.Peek(n)
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
