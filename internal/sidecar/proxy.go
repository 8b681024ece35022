// Package sidecar is the retry-sidecar: a forward HTTP proxy that sends each
// request through a retrypolicy.Transport (routing), loads and hot-reloads the
// policies (Reloader), and serves health, readiness and metrics (Admin). It has
// no retry logic of its own: every decision is pkg/retrypolicy's.
package sidecar

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Proxy is the forward proxy handler. It accepts
//
//	absolute-form  GET http://api.example/v1 HTTP/1.1   (what HTTP_PROXY clients send)
//	origin-form    GET /v1 HTTP/1.1 + Host: api.example (routed by Host)
//	CONNECT        CONNECT api.example:443 HTTP/1.1     (tunnelled unchanged, never retried)
//
// removes hop-by-hop headers in both directions (RFC 9110 §7.6.1), adds none of
// its own upstream (no Via, no X-Forwarded-*; the Transport adds X-Retry-Attempt
// for upstreams with a policy), and streams bodies with pooled buffers.
type Proxy struct {
	// Transport sends the request: a *retrypolicy.Transport whose Route picks
	// the policy, passing hosts without one straight to its Inner.
	Transport http.RoundTripper
	// Dial opens CONNECT tunnels.
	Dial func(network, addr string) (net.Conn, error)
	// Metrics counts pass-through requests and tunnels; required.
	Metrics *Metrics
	// Log receives tunnel and pass-through errors (never a header value, a body
	// or a query).
	Log *slog.Logger
	// Route reports whether a request has a policy (for pass-through accounting).
	Route func(*http.Request) *retrypolicy.Policy
	// Self is the proxy's own listen address; a request for it is a loop (508).
	Self string

	tunnels tunnels
}

// bufPool holds the copy buffers of response bodies and tunnels.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	out := r.WithContext(r.Context()) // shallow copy: the server's request is left alone
	switch {
	case r.URL.Host != "": // absolute-form
		if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
			plainError(w, http.StatusBadRequest, "retry-sidecar: only http and https URLs can be proxied\n")
			return
		}
	case r.Host != "": // origin-form, routed by Host
		u := *r.URL
		u.Scheme, u.Host = "http", r.Host
		out.URL = &u
	default:
		plainError(w, http.StatusBadRequest, "retry-sidecar: request has no host\n")
		return
	}
	if p.Self != "" && strings.EqualFold(out.URL.Host, p.Self) {
		plainError(w, http.StatusLoopDetected, "retry-sidecar: request addressed to the proxy itself\n")
		return
	}
	p.forward(w, r, out)
}

// forward sends out, the upstream form of the client's request r, and copies
// the response (or the error) back to w.
func (p *Proxy) forward(w http.ResponseWriter, r, out *http.Request) {
	out.RequestURI = ""
	out.Close = false // the client's Connection: close is not the upstream connection's business
	if hasHopByHop(r.Header) {
		out.Header = r.Header.Clone()
		removeHopByHop(out.Header)
	}

	resp, err := p.Transport.RoundTrip(out)
	passthrough := p.Route != nil && p.Route(out) == nil
	if err != nil {
		if passthrough {
			p.Metrics.passthroughErr.Inc()
		}
		p.writeError(w, r, err)
		return
	}
	if passthrough {
		p.Metrics.passthroughOK.Inc()
	}
	defer resp.Body.Close()

	h := w.Header()
	copyEndToEnd(h, resp.Header)
	if _, ok := resp.Header["Content-Type"]; !ok {
		h["Content-Type"] = nil // do not let the server sniff and add one
	}
	if len(resp.Trailer) > 0 {
		for k := range resp.Trailer {
			h.Add("Trailer", k)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		copyBody(w, resp.Body, resp.ContentLength < 0)
	}
	if len(resp.Trailer) > 0 {
		for k, vv := range resp.Trailer {
			h[k] = vv
		}
	}
}

// copyBody streams src to w with a pooled buffer. A response of unknown length
// (chunked, server-sent events, long polls) is flushed after every read so the
// proxy adds no buffering delay; a sized one is left to the server's buffer.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var f http.Flusher
	if flush {
		f, _ = w.(http.Flusher)
	}
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // client gone; closing the body releases the upstream
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// writeError answers a request that got no upstream response. For upstreams with
// a policy the outcome and the number of transmissions are reported as on any
// response: deadline-exceeded → 504, anything else → 502.
func (p *Proxy) writeError(w http.ResponseWriter, r *http.Request, err error) {
	h := w.Header()
	status, msg := http.StatusBadGateway, "retry-sidecar: upstream request failed\n"
	var re *retrypolicy.Error
	if errors.As(err, &re) {
		h[retrypolicy.HeaderOutcome] = []string{string(re.Outcome)}
		h[retrypolicy.HeaderAttempts] = []string{itoa(re.Attempts)}
		msg = "retry-sidecar: " + string(re.Outcome) + "\n"
		if re.Outcome == retrypolicy.OutcomeDeadlineExceeded {
			status = http.StatusGatewayTimeout
		}
	} else if r.Context().Err() == nil {
		// A pass-through failure: the error text names the URL, so it is not logged.
		p.Log.Debug("pass-through request failed", "method", r.Method, "path", r.URL.Path, "outcome", string(retrypolicy.OutcomeUpstreamError))
	}
	plainError(w, status, msg)
}

func plainError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

func itoa(n int) string {
	const digits = "0123456789"
	if n >= 0 && n < 10 {
		return digits[n : n+1]
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
