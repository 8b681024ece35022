// Package sidecar is the retry-sidecar: a forward HTTP proxy that sends each
// request through a retryhttp.Transport (routing), with the policies that
// package config (internal/sidecar/config) loads and hot-reloads, and serves
// health, readiness and metrics (Admin). It has no retry logic of its own:
// every decision is pkg/retrypolicy's.
package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Proxy is the forward proxy handler. It accepts
//
//	absolute-form  GET http://api.example/v1 HTTP/1.1   (what HTTP_PROXY clients send)
//	origin-form    GET /v1 HTTP/1.1 + Host: api.example (routed by Host)
//	CONNECT        CONNECT api.example:443 HTTP/1.1     (tunnelled unchanged, never retried,
//	               unless the app speaks HTTP/2 to a policy's plaintext upstream in it)
//	HTTP/2         :authority api.example, :path /v1    (routed like origin-form; a gRPC
//	               call is forwarded as a stream, grpc.go)
//
// removes hop-by-hop headers in both directions (RFC 9110 §7.6.1), adds none of
// its own upstream (no Via, no X-Forwarded-*; the Transport adds X-Retry-Attempt
// for upstreams with a policy), and streams bodies with pooled buffers.
type Proxy struct {
	// Transport sends the request: a *retryhttp.Transport whose Route picks
	// the policy, passing hosts without one straight to its Inner.
	Transport http.RoundTripper
	// Dial opens CONNECT tunnels, within ctx.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Metrics counts pass-through requests and tunnels; required.
	Metrics *Metrics
	// Log receives tunnel and pass-through errors (never a header value, a body
	// or a query).
	Log *slog.Logger
	// Route reports whether a request has a policy (for pass-through accounting);
	// nil counts nothing. With a *retryhttp.Transport its own lookup is used
	// instead (once per request: routing and accounting agree).
	Route func(*http.Request) *retrypolicy.Policy
	// Self holds the sidecar's own listen addresses; a request for one of them
	// is a loop (508), never forwarded.
	Self *selfAddrs
	// Tracing records a SERVER span per request forwarded through a
	// *retryhttp.Transport whose Inner and Observer carry its Tracer
	// (docs/observability.md#tracing); nil records nothing.
	Tracing *tracing.Tracing
	// PolicyName names the RetryPolicy of a policy, for the spans.
	PolicyName func(*retrypolicy.Policy) string

	// grpc forwards the gRPC calls (grpc.go); nil: they are forwarded as
	// any HTTP request.
	grpc *grpcForwarder
	// h2 serves the HTTP/2 of the CONNECT tunnels it terminates (tunnel.go);
	// nil: every tunnel is opaque.
	h2 *appHTTP2

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
	if p.Self.targets(out.URL.Host, defaultPort(out.URL.Scheme)) {
		p.loop(w, r)
		return
	}
	p.dispatch(w, r, out)
}

// dispatch forwards out, the upstream form of r: a gRPC call as one
// (grpc.go), anything else as an HTTP request.
func (p *Proxy) dispatch(w http.ResponseWriter, r, out *http.Request) {
	if p.grpc != nil && isGRPC(r) {
		var pol *retrypolicy.Policy
		if p.Route != nil {
			pol = p.Route(out)
		}
		p.grpc.forward(w, r, out, pol)
		return
	}
	p.forward(w, r, out)
}

// loop answers a request addressed to the sidecar itself: 508, or
// UNAVAILABLE to a gRPC call.
func (p *Proxy) loop(w http.ResponseWriter, r *http.Request) {
	if p.grpc != nil && isGRPC(r) {
		grpcAnswer(w, grpcUnavailable, errLoop.Error(), retrypolicy.OutcomeUpstreamError, 0)
		return
	}
	loopError(w)
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

	var resp *http.Response
	var err error
	var passthrough bool
	status := 0 // answered to the app, for the span
	var body *appBody
	if out.Body != nil && out.Body != http.NoBody {
		body = &appBody{ReadCloser: out.Body}
		out.Body = body
	}
	if rt, ok := p.Transport.(*retryhttp.Transport); ok {
		// One lookup: the policy applied is the one counted.
		var pol *retrypolicy.Policy
		if rt.Route != nil {
			pol = rt.Route(out)
		}
		if span := p.startSpan(r, out, pol); span != nil {
			defer func() { span.End(status) }()
		}
		resp, err = libhooks.RoundTripPolicy(rt, out, pol)
		passthrough = p.Route != nil && pol == nil
	} else {
		resp, err = p.Transport.RoundTrip(out)
		passthrough = p.Route != nil && p.Route(out) == nil
	}
	if body.malformed(r) {
		status = p.badRequestBody(w, r, resp, err)
		return
	}
	if err != nil {
		if passthrough {
			p.Metrics.passthroughErr.Inc()
		}
		status = p.writeError(w, r, err)
		return
	}
	if passthrough {
		p.Metrics.passthroughOK.Inc()
	}
	defer resp.Body.Close()
	if resp.StatusCode < 100 || resp.StatusCode > 999 || resp.StatusCode == http.StatusSwitchingProtocols {
		// Unrelayable (an upstream client that lets such a status through):
		// answered like any malformed response, never a panic or a dropped
		// connection. Upgrades are not proxied.
		status = p.writeError(w, r, &retryhttp.Error{Outcome: retrypolicy.OutcomeUpstreamError, Attempts: 1,
			Err: retryhttp.ErrMalformedResponse})
		return
	}

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
	status = resp.StatusCode
	if r.Method != http.MethodHead {
		if err := copyBody(w, resp.Body, resp.ContentLength < 0); err != nil {
			p.abort(w, r, err)
		}
	}
	if len(resp.Trailer) > 0 {
		for k, vv := range resp.Trailer {
			h[k] = vv
		}
	}
}

// appBody is the app's request body as the upstream client reads it: it
// keeps the first error other than its end, which is the app's, not the
// upstream's.
type appBody struct {
	io.ReadCloser
	err error
}

func (b *appBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// A read after Close is the upstream client's own doing: it closes the
	// body when the upstream answers before reading it all.
	if err != nil && err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose) && b.err == nil {
		b.err = err
	}
	return n, err
}

// malformed reports whether the app's request body could not be read while
// the app is still there: its framing is broken (a chunk size past 64 bits,
// a bad chunk line), which net/http.Server's body reports as a read error.
// The app gone mid-body is no bad request: its context has ended.
func (b *appBody) malformed(r *http.Request) bool {
	return b != nil && b.err != nil && r.Context().Err() == nil
}

// badRequestBody answers 400 to a request whose body the app sent malformed
// (docs/retry-semantics.md#malformed-request-bodies), whatever the upstream client made
// of the failure, never a 502. An attempt that had gone upstream was aborted:
// the upstream client closed its connection (or reset its stream) on the
// body's error, before the request's end, so the upstream never got a whole
// request. Both are counted in retry_sidecar_malformed_request_bodies_total.
func (p *Proxy) badRequestBody(w http.ResponseWriter, r *http.Request, resp *http.Response, err error) int {
	if resp != nil {
		resp.Body.Close() // an early answer; the request it answers was cut short
	}
	attempt := attemptAborted
	var re *retryhttp.Error
	if errors.As(err, &re) && re.Attempts == 0 {
		attempt = attemptUnsent // read into a replay buffer, never sent
	}
	p.Metrics.malformedBodies.WithLabelValues(attempt).Inc()
	p.Log.Info("malformed request body from the app; answered 400", "method", r.Method, "path", r.URL.Path,
		"request_id", r.Header.Get(retryhttp.HeaderRequestID), "attempt", attempt)
	w.Header()["Connection"] = []string{"close"} // the rest of its body cannot be framed
	plainError(w, http.StatusBadRequest, "retry-sidecar: malformed request body\n")
	return http.StatusBadRequest
}

// startSpan starts the SERVER span of the app's request r, forwarded as out
// under policy pol, when tracing records it: out then carries the span in
// its context, set in place (out is the proxy's own copy of r, and a sampled
// request is spared another).
func (p *Proxy) startSpan(r, out *http.Request, pol *retrypolicy.Policy) libhooks.Span {
	if p.Tracing == nil {
		return nil
	}
	policy, upstream := "", ""
	if pol != nil {
		upstream = pol.Name()
		if p.PolicyName != nil {
			policy = p.PolicyName(pol)
		}
	}
	ctx, span := p.Tracing.Start(r.Context(), r.Header, r.Method, policy, upstream)
	if span != nil {
		*out = *out.WithContext(ctx)
	}
	return span
}

// errClientGone: the app stopped reading the response.
var errClientGone = errors.New("retry-sidecar: client gone")

// copyBody streams src to w with a pooled buffer. A response of unknown length
// (chunked, server-sent events, long polls) is flushed after every read so the
// proxy adds no buffering delay; a sized one is left to the server's buffer.
// It returns nil when src ended cleanly, errClientGone when the app went away,
// and the upstream's error when the body was cut off before its end.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) error {
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
				return errClientGone // closing the body releases the upstream
			}
			if f != nil {
				f.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// abort ends a response whose upstream body was cut off before its announced
// end: the connection to the app is closed without the terminating chunk, so
// the app's client sees an error, never a truncated body passed off as whole
// (docs/sidecar.md#what-the-app-can-rely-on).
func (p *Proxy) abort(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errClientGone) || r.Context().Err() != nil {
		return
	}
	// What did arrive goes out first, as a direct connection would have shown it;
	// then the connection closes short of the announced end.
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	p.Metrics.truncated.Inc()
	p.Log.Warn("upstream response body cut off; aborting the response to the app",
		"method", r.Method, "path", r.URL.Path, "request_id", r.Header.Get(retryhttp.HeaderRequestID))
	panic(http.ErrAbortHandler)
}

// passthroughPhase is the phase of a timeout of a request without a policy:
// only its dial (and TLS handshake) is bounded, by --dial-timeout.
func passthroughPhase(err error) retryhttp.Phase {
	var pe *retryhttp.PhaseError
	var ne net.Error
	if errors.As(err, &pe) && errors.As(err, &ne) && ne.Timeout() {
		return pe.Phase
	}
	return ""
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

func loopError(w http.ResponseWriter) {
	w.Header()[retryhttp.HeaderOutcome] = []string{string(retrypolicy.OutcomeUpstreamError)}
	plainError(w, http.StatusLoopDetected, errLoop.Error()+"\n")
}

// writeError answers a request that got no upstream response. For upstreams with
// a policy the outcome and the number of transmissions are reported as on any
// response: deadline-exceeded → 504, anything else → 502.
//
// A pass-through failure (no policy) is answered 502 with outcome
// upstream-error too: the header is on a response the sidecar generated, not
// added to anything the upstream sent. A loop is 508.
//
// It returns the status it answered.
func (p *Proxy) writeError(w http.ResponseWriter, r *http.Request, err error) int {
	if errors.Is(err, errLoop) {
		loopError(w)
		return http.StatusLoopDetected
	}
	h := w.Header()
	status, msg := http.StatusBadGateway, "retry-sidecar: upstream request failed\n"
	var phase retryhttp.Phase
	var re *retryhttp.Error
	if errors.As(err, &re) {
		h[retryhttp.HeaderOutcome] = []string{string(re.Outcome)}
		h[retryhttp.HeaderAttempts] = []string{itoa(re.Attempts)}
		if !re.NotBefore.IsZero() {
			h[retryhttp.HeaderNotBefore] = []string{httpdate.Format(re.NotBefore)}
		}
		msg = "retry-sidecar: " + string(re.Outcome) + "\n"
		phase = re.Phase
		if re.Outcome == retrypolicy.OutcomeDeadlineExceeded {
			status = http.StatusGatewayTimeout
		}
	} else {
		h[retryhttp.HeaderOutcome] = []string{string(retrypolicy.OutcomeUpstreamError)}
		h[retryhttp.HeaderAttempts] = []string{"1"}
		phase = passthroughPhase(err)
		if phase != "" {
			p.Metrics.passthroughTimeout(phase)
		}
		if r.Context().Err() == nil {
			// The error text names the URL, so it is not logged.
			p.Log.Debug("pass-through request failed", "method", r.Method, "path", r.URL.Path,
				"outcome", string(retrypolicy.OutcomeUpstreamError), "phase", string(phase))
		}
	}
	if phase != "" {
		// A timeout: which budget ran out (docs/retry-semantics.md#timeouts).
		h[retryhttp.HeaderTimeoutPhase] = []string{string(phase)}
		status = http.StatusGatewayTimeout
		msg = "retry-sidecar: timeout (" + string(phase) + ")\n"
	}
	if errors.Is(err, retryhttp.ErrMalformedResponse) {
		msg = "retry-sidecar: upstream-error: the upstream's response could not be relayed\n"
	}
	if errors.Is(err, retryhttp.ErrUntrustedCertificate) {
		msg = "retry-sidecar: upstream-error: the upstream's TLS certificate did not verify: " + untrustedReason(err) + "\n"
	}
	plainError(w, status, msg)
	return status
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
