package sidecar

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Transparent serves --transparent-listen: the connections that the redirect
// rules (internal/interception, `retry-sidecar redirect`) divert to the sidecar
// from apps that know nothing of a proxy. Their requests are origin-form
// (GET /v1 + Host: api.example), as the app wrote them for the upstream.
//
//	policy     matched by the Host header's authority, exactly as the forward
//	           proxy matches an origin-form request;
//	upstream   the connection's original destination (SO_ORIGINAL_DST), never
//	           a DNS lookup of Host: the app already chose the address; with
//	           tls, that address on the TLS port, verified as Host
//	           (docs/clients.md#tls);
//	loop       an original destination that is one of the sidecar's own
//	           addresses answers 508 (a direct connection to the listener);
//	refused    CONNECT and absolute-form requests (an app speaking to its own
//	           proxy on an intercepted port) answer 400: exclude that port.
//
// The sidecar's own upstream connections are not redirected again: the rules
// exclude its UID.
type Transparent struct {
	// Proxy forwards the request: upstreamStack.proxy(byHost), which
	// matches by Host since the upstream URL names an address.
	Proxy *Proxy
	// Self are the sidecar's own listen addresses.
	Self []netip.AddrPort
}

type originalDstKey struct{}

type originalDst struct {
	addr netip.AddrPort
	err  error
}

// ConnContext is the transparent server's http.Server.ConnContext: it reads
// each connection's original destination once, when it is accepted.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	addr, err := OriginalDst(c)
	return context.WithValue(ctx, originalDstKey{}, originalDst{addr: addr, err: err})
}

// ServeHTTP implements http.Handler.
func (t *Transparent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	od, ok := r.Context().Value(originalDstKey{}).(originalDst)
	if !ok || od.err != nil || !od.addr.IsValid() {
		err := od.err
		if err == nil {
			err = errors.New("no original destination")
		}
		t.Proxy.Log.Warn("transparent connection without an original destination", "error", err.Error())
		t.refuse(w, r, http.StatusBadGateway, "retry-sidecar: the connection's original destination is unknown (it did not come through the redirect rules)")
		return
	}
	dst := netip.AddrPortFrom(od.addr.Addr().Unmap(), od.addr.Port())
	if slices.Contains(t.Self, dst) {
		t.refuse(w, r, http.StatusLoopDetected, "retry-sidecar: request addressed to the proxy itself")
		return
	}
	if r.Method == http.MethodConnect || r.URL.Host != "" {
		plainError(w, http.StatusBadRequest, "retry-sidecar: an intercepted connection carries origin-form requests only; an app that uses its own proxy on this port needs the port excluded from interception\n")
		return
	}
	out := r.WithContext(r.Context())
	u := *r.URL
	u.Scheme, u.Host = "http", dst.String()
	out.URL = &u // out.Host stays r.Host: sent upstream, and what the policy matched
	t.Proxy.dispatch(w, r, out)
}

// refuse answers a request the listener cannot forward: status and msg, or
// UNAVAILABLE with msg to a gRPC call (docs/sidecar.md#grpc-and-http2).
func (t *Transparent) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if t.Proxy.grpc != nil && isGRPC(r) {
		grpcAnswer(w, grpcUnavailable, msg, retrypolicy.OutcomeUpstreamError, 0)
		return
	}
	plainError(w, status, msg+"\n")
}

// listenAddrPorts are the addresses the sidecar listens on, as AddrPorts.
func listenAddrPorts(lns ...net.Listener) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	return out
}
