package h1client

// TLS origination (docs/tls.md): the sidecar's app speaks plain HTTP and the
// upstream is reached over TLS. Why this client and not net/http.Transport:
//
//   - HTTP/1.1 over TLS keeps every promise of the package doc because it IS
//     this client: the same pool, the same liveness check before reuse (extended
//     to what the TLS layer holds, see tlsQuiet), the same "nothing written"
//     rule, the same framing checks. net/http.Transport would resend on its own
//     (docs/retry-semantics.md#attempts).
//   - HTTP/2, when the upstream selects it by ALPN, runs on net/http's own
//     HTTP/2 client connection (http.Transport.NewClientConn over the
//     connection this client dialled and verified). A ClientConn sends each
//     request exactly once: the resend loop of net/http lives in
//     Transport.RoundTrip, which is never used here. A stream the server
//     refused (REFUSED_STREAM, or past a GOAWAY's last stream id) is the one
//     case HTTP/2 guarantees unprocessed; it is NOT resent here either but
//     returned as an error, which the policy treats as ambiguous: retried only
//     when replayable, and then counted as an attempt.
//   - The handshake happens inside the dial, bounded with it by
//     TLSDialTimeout and the attempt's connect timeout: a handshake failure,
//     whichever timer or peer cut it, is a dial error (*net.OpError, Op
//     "dial") tagged retryhttp.PhaseTLS, a connect failure — nothing of the
//     request was sent. A
//     certificate that does not verify is retryhttp.ErrUntrustedCertificate
//     instead: never retried, since every attempt would meet it again.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// TLSOrigin is where and how RoundTripTLS reaches an upstream.
type TLSOrigin struct {
	// Addr is the host:port dialled.
	Addr string
	// Config holds ServerName (sent as SNI, the name the certificate must be
	// valid for), RootCAs (nil: the system roots) and MinVersion. NextProtos is
	// replaced: h2 and http/1.1 are offered. It is not modified.
	Config *tls.Config
	// Key names Addr and Config; connections are pooled by it, so origins with
	// equal keys must have equal settings.
	Key string
}

// DefaultTLSDialTimeout bounds the TCP connect and TLS handshake together when
// TLSDialTimeout is 0.
const DefaultTLSDialTimeout = 10 * time.Second

// errUntrusted wraps a verification failure so that both
// retryhttp.ErrUntrustedCertificate and the *tls.CertificateVerificationError
// are found by errors.Is / errors.As.
type untrustedError struct{ err error }

func (e *untrustedError) Error() string {
	return retryhttp.ErrUntrustedCertificate.Error() + ": " + e.err.Error()
}
func (e *untrustedError) Unwrap() []error { return []error{retryhttp.ErrUntrustedCertificate, e.err} }

// RoundTripTLS sends req (an http:// request as the app made it) to o over TLS:
// HTTP/2 when the upstream selected it by ALPN, else HTTP/1.1 on this client's
// pool. The request's Host is sent unchanged. Request bodies of any length are
// written on the caller's goroutine (there is no fallback transport for TLS
// origination); an Expect header is dropped (the app's connection to the
// sidecar has answered it), and upgrades and request trailers are refused.
func (t *Transport) RoundTripTLS(req *http.Request, o *TLSOrigin) (*http.Response, error) {
	switch {
	case req.Method == http.MethodConnect, len(req.Header["Upgrade"]) > 0, len(req.Trailer) > 0, req.URL.User != nil:
		closeBody(req)
		return nil, fmt.Errorf("%w: CONNECT, upgrades, request trailers and user info are not sent over TLS origination", errUnsupported)
	}
	if err := validate(req); err != nil {
		closeBody(req)
		return nil, err
	}
	if _, ok := req.Header["Expect"]; ok {
		r := req.WithContext(req.Context())
		r.Header = req.Header.Clone()
		delete(r.Header, "Expect")
		req = r
	}
	if cc := t.h2Reserved(o.Key); cc != nil {
		return roundTripH2(cc, req)
	}
	return t.roundTripPooled(req, o.Key, o)
}

// dialTLS opens a verified TLS connection to o: TCP connect and handshake
// together within TLSDialTimeout.
func (t *Transport) dialTLS(ctx context.Context, o *TLSOrigin) (*tls.Conn, error) {
	timeout := t.TLSDialTimeout
	if timeout <= 0 {
		timeout = DefaultTLSDialTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := t.dialer()(dctx, "tcp", o.Addr)
	if err != nil {
		return nil, &retryhttp.PhaseError{Phase: retryhttp.PhaseConnect, Err: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cfg := o.Config.Clone()
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	cfg.InsecureSkipVerify = false
	if t.DisableHTTP2 {
		cfg.NextProtos = []string{"http/1.1"}
	} else {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(dctx); err != nil {
		nc.Close()
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) {
			return nil, &untrustedError{err: cv}
		}
		// Whatever cut it (the peer, --dial-timeout, the connect timeout, the
		// attempt's own bound, the caller), nothing of the request was sent: a
		// connect failure in phase tls (docs/retry-semantics.md#timeouts). The
		// context's error stays underneath, so a timeout is seen as one.
		return nil, &retryhttp.PhaseError{Phase: retryhttp.PhaseTLS,
			Err: &net.OpError{Op: "dial", Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: fmt.Errorf("tls handshake: %w", err)}}
	}
	return tc, nil
}

// tlsQuiet reports whether an idle TLS connection holds no data: a read with a
// deadline in the past returns what the TLS layer has buffered (decrypted or
// complete records: a close_notify, stray bytes) without touching the socket,
// and otherwise times out, which leaves the connection usable.
func tlsQuiet(tc *tls.Conn) bool {
	_ = tc.SetReadDeadline(aLongTimeAgo)
	var b [1]byte
	n, err := tc.Read(b[:])
	_ = tc.SetReadDeadline(time.Time{})
	var ne net.Error
	return n == 0 && errors.As(err, &ne) && ne.Timeout()
}

// ---- HTTP/2 ----

type preDialedKey struct{}

// h2Transport builds the net/http transport whose only use is
// NewClientConn over a connection this client dialled and verified.
func (t *Transport) h2Transport() *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h2t == nil {
		var p http.Protocols
		p.SetHTTP2(true)
		t.h2t = &http.Transport{
			Proxy: nil,
			DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				if c, ok := ctx.Value(preDialedKey{}).(net.Conn); ok {
					return c, nil
				}
				return nil, errors.New("h1client: HTTP/2 connection without a dialled TLS connection")
			},
			Protocols:          &p,
			DisableCompression: true,
			IdleConnTimeout:    t.IdleConnTimeout,
		}
	}
	return t.h2t
}

// newH2 wraps a TLS connection that negotiated h2 and adds it to the pool.
func (t *Transport) newH2(ctx context.Context, key, addr string, tc *tls.Conn) (*http.ClientConn, error) {
	cc, err := t.h2Transport().NewClientConn(context.WithValue(ctx, preDialedKey{}, net.Conn(tc)), "https", addr)
	if err != nil {
		tc.Close()
		return nil, err
	}
	t.mu.Lock()
	if t.h2conns == nil {
		t.h2conns = make(map[string][]*http.ClientConn)
	}
	t.h2conns[key] = append(t.h2conns[key], cc)
	t.mu.Unlock()
	return cc, nil
}

// h2Reserved returns a pooled HTTP/2 connection of key with a stream reserved
// for the caller, or nil. Closed connections and those past a GOAWAY are
// dropped on the way.
func (t *Transport) h2Reserved(key string) *http.ClientConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.h2conns[key]
	for i := 0; i < len(list); {
		cc := list[i]
		if cc.Err() != nil {
			list = append(list[:i], list[i+1:]...)
			go cc.Close()
			continue
		}
		if cc.Reserve() == nil {
			t.h2conns[key] = list
			return cc
		}
		i++
	}
	if len(list) == 0 {
		delete(t.h2conns, key)
	} else {
		t.h2conns[key] = list
	}
	return nil
}

// roundTripH2 sends req once as an HTTP/2 stream on cc (a stream reserved).
func roundTripH2(cc *http.ClientConn, req *http.Request) (*http.Response, error) {
	out := req.WithContext(req.Context())
	u := *req.URL
	u.Scheme = "https"
	out.URL = &u
	if out.Host == "" {
		out.Host = req.URL.Host
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		// net/http would add its own; the upstream gets what the app sent.
		out.Header = req.Header.Clone()
		if out.Header == nil {
			out.Header = http.Header{}
		}
		out.Header["User-Agent"] = []string{""}
	}
	out.GetBody = nil
	return cc.RoundTrip(out)
}

// closeIdleH2 closes the HTTP/2 connections with nothing in flight.
func (t *Transport) closeIdleH2() {
	var idle []*http.ClientConn
	t.mu.Lock()
	for key, list := range t.h2conns {
		keep := list[:0]
		for _, cc := range list {
			if cc.Err() != nil || cc.InFlight() == 0 {
				idle = append(idle, cc)
			} else {
				keep = append(keep, cc)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(t.h2conns, key)
		} else {
			t.h2conns[key] = keep
		}
	}
	t.mu.Unlock()
	for _, cc := range idle {
		cc.Close()
	}
}
