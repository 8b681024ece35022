package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"

	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// gRPC calls (docs/sidecar.md#grpc-and-http2) reach the Proxy as HTTP/2
// requests with a content-type of application/grpc: on --listen and
// --transparent-listen with prior knowledge, and inside a CONNECT tunnel the
// sidecar terminates. Each is one stream, forwarded as a stream: HTTP/2 to the
// upstream (cleartext, or TLS when its policy has tls), messages copied both
// ways as they arrive, the upstream's headers, trailers and status passed
// unchanged, the app's reset passed on as a reset. What the sidecar answers
// itself is a gRPC status: UNAVAILABLE when no upstream answered,
// DEADLINE_EXCEEDED when grpc-timeout ran out first.

// grpc-status codes the sidecar answers with (google.golang.org/grpc/codes).
const (
	grpcDeadlineExceeded = 4
	grpcUnavailable      = 14
)

// isGRPC reports whether r is a gRPC call: HTTP/2 with a gRPC content-type
// (application/grpc, +proto, +json, …; gRPC-Web is HTTP/1.1's business).
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	ct := r.Header.Get("Content-Type")
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// grpcForwarder forwards the gRPC calls of one listener (its routing): it is
// built by upstreamStack.proxy beside the listener's retryhttp.Transport.
type grpcForwarder struct {
	routing  routing
	reloader *config.Reloader
	// h2c carries the calls to cleartext upstreams; tls those whose policy
	// has tls (h1client's TLS origination, HTTP/2 by ALPN).
	h2c *http2.Transport
	tls *h1client.Transport
	log *slog.Logger
	// metrics counts the calls passed through (no policy) as requests;
	// nil counts nothing.
	metrics *Metrics
	// retry decides whether an attempt is followed by another
	// (grpcretry.go); nil: every call is one attempt.
	retry grpcRetrier
	// replayMemory is --max-replay-memory, shared with the HTTP path;
	// holds bounds the held answer bytes of each app connection
	// (grpchold.go). Either nil: no bound.
	replayMemory *retryhttp.ReplayMemory
	holds        *holdShares
	// tracing records a span per retried call, a child span per attempt
	// (nil: off); policyName names a policy's RetryPolicy in them.
	tracing    *tracing.Tracing
	policyName func(*retrypolicy.Policy) string
}

// newH2CTransport is the upstream client of cleartext gRPC upstreams: one
// pool of HTTP/2 connections per address, dialled through dial (loop
// detection, --dial-timeout) within the policy's connectTimeout, a failed
// dial tagged as a connect failure. It resends nothing on its own: every
// attempt's GetBody (unprocessed) turns a stream the upstream did not
// process into the attempt's error.
func newH2CTransport(o Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http2.Transport {
	return &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			if d, ok := ctx.Value(grpcConnectTimeoutKey{}).(time.Duration); ok && d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, &retryhttp.PhaseError{Phase: retryhttp.PhaseConnect, Err: err}
			}
			return c, nil
		},
		DisableCompression: true,
		IdleConnTimeout:    o.IdleConnTimeout,
		MaxHeaderListSize:  grpcMaxHeaderBytes,
		ReadIdleTimeout:    30 * time.Second, // a silent connection is pinged …
		PingTimeout:        15 * time.Second, // … and dropped if the ping goes unanswered
	}
}

type grpcConnectTimeoutKey struct{}

// unprocessed is every attempt's GetBody: the h2c client asks for a body
// again only when the upstream did not process the stream (REFUSED_STREAM,
// past a GOAWAY, a connection unusable before the stream), and gets this
// error back instead of resending on its own: the attempt ends there, and
// its error says so (grpcAttempt.Refused).
func unprocessed() (io.ReadCloser, error) { return nil, errUnprocessed }

var errUnprocessed = errors.New("retry-sidecar: the upstream did not process the stream (refused, or past a GOAWAY)")

// grpcMaxHeaderBytes bounds a header list, of a call from the app and of an
// answer from the upstream: gRPC metadata is small (grpc-go's own default
// limit is 16 MiB, but its servers answer far less).
const grpcMaxHeaderBytes = 64 << 10

// forward sends out, the upstream form of the app's call r, under its policy
// (nil: passed through) and relays the answer to w. A call the retry hook
// may retry goes through forwardRetrying (grpcretry.go); every other is one
// attempt, streamed both ways from the start.
func (g *grpcForwarder) forward(w http.ResponseWriter, r, out *http.Request, pol *retrypolicy.Policy) {
	out.RequestURI = ""
	out.Close = false
	out.Header = r.Header.Clone()
	removeHopByHop(out.Header)
	out.Header["Te"] = []string{"trailers"} // gRPC's own, not a hop's choice
	ctx := out.Context()
	if pol != nil {
		ctx = context.WithValue(ctx, grpcConnectTimeoutKey{}, pol.ConnectTimeout())
		out.Header[retryhttp.HeaderAttempt] = []string{"1"}
	}
	if d, ok := parseGRPCTimeout(r.Header.Get("Grpc-Timeout")); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	out = out.WithContext(ctx)
	if out.Body == http.NoBody {
		out.Body = nil
	}
	out.GetBody = unprocessed
	if g.retry != nil && pol != nil && g.retry.Retries(pol, out) {
		g.forwardRetrying(w, r, out, pol)
		return
	}
	span := g.startSpan(r, out, pol)
	if span != nil {
		defer func() { span.End(answered(w, r)) }()
		defer func() { code, _, _ := answered(w, r); span.EndAttempt(code, "") }()
	}
	span.StartAttempt(out.Header, out.URL.Host)
	resp, err := g.roundTrip(out)
	if pol == nil && g.metrics != nil {
		if err != nil {
			g.metrics.passthroughErr.Inc()
		} else {
			g.metrics.passthroughOK.Inc()
		}
	}
	if err != nil {
		span.EndAttempt(-1, "_OTHER") // no status came
		g.answerError(w, r, ctx, pol, 1, "", err)
		return
	}
	defer resp.Body.Close()
	var outcome func(*http.Response) retrypolicy.Outcome // passed through: nothing added
	if pol != nil {
		outcome = grpcOutcome
	}
	g.relay(w, r, ctx, &heldAnswer{resp: resp}, outcome, 1)
}

// roundTrip sends one attempt: over TLS when the policy that routed it has
// tls, else in cleartext.
func (g *grpcForwarder) roundTrip(out *http.Request) (*http.Response, error) {
	if u := tlsUpstream(g.reloader, g.routing, out); u != nil {
		return g.tls.RoundTripTLS(out, u.Origin(g.routing.authority(out), out.URL.Host))
	}
	return g.h2c.RoundTrip(out)
}

// relay copies the upstream's answer to the app: headers at once (a stream
// may wait long for its first message), what a held answer holds, each
// further message as it arrives, then the trailers, with the outcome (of the
// whole answer; nil: a call passed through, nothing added) and attempts. A
// Trailers-Only answer
// (grpc-status in the headers) stays one: nothing is flushed before it ends.
func (g *grpcForwarder) relay(w http.ResponseWriter, r *http.Request, ctx context.Context,
	a *heldAnswer, outcome func(*http.Response) retrypolicy.Outcome, attempts int) {
	resp := a.resp
	h := w.Header()
	copyEndToEnd(h, resp.Header)
	_, trailersOnly := resp.Header["Grpc-Status"]
	if trailersOnly && outcome != nil {
		setOutcome(h, "", outcome(resp), attempts)
	}
	w.WriteHeader(resp.StatusCode)
	if !trailersOnly {
		http.NewResponseController(w).Flush()
	}
	err := a.err
	if len(a.data) > 0 {
		if _, werr := w.Write(a.data); werr != nil {
			return // the app reset the stream: so was the upstream's, by ctx
		}
		http.NewResponseController(w).Flush()
	}
	if err == nil && !a.complete {
		err = copyBody(w, resp.Body, true)
	}
	if err != nil {
		if errors.Is(err, errClientGone) || r.Context().Err() != nil {
			return // the app reset the stream: so was the upstream's, by ctx
		}
		code, cut := grpcUnavailable, retrypolicy.OutcomeUpstreamError
		if ctx.Err() != nil {
			code, cut = grpcDeadlineExceeded, retrypolicy.OutcomeDeadlineExceeded
		}
		g.log.Debug("gRPC answer cut off upstream", "path", r.URL.Path, "outcome", string(cut))
		setGRPCStatus(h, http.TrailerPrefix, code, "retry-sidecar: the upstream's answer ended early")
		setOutcome(h, http.TrailerPrefix, cut, attempts)
		return
	}
	for k, vv := range resp.Trailer {
		h[trailerName(k)] = vv
	}
	if !trailersOnly && outcome != nil {
		setOutcome(h, http.TrailerPrefix, outcome(resp), attempts)
	}
}

// grpcOutcome is the outcome of a one-attempt call answered with resp: what
// was not retried was not retryable.
func grpcOutcome(resp *http.Response) retrypolicy.Outcome {
	if grpcStatusOf(resp) == "0" {
		return retrypolicy.OutcomeSuccess
	}
	return retrypolicy.OutcomeNotRetryable
}

// grpcStatusOf is the grpc-status of an answer read to its end: in the
// headers of a Trailers-Only answer, else in the trailers.
func grpcStatusOf(resp *http.Response) string {
	if v, ok := resp.Header["Grpc-Status"]; ok && len(v) > 0 {
		return v[0]
	}
	return resp.Trailer.Get("Grpc-Status")
}

// answerError answers a call no upstream answered, in gRPC's terms: a
// Trailers-Only answer (HTTP 200, grpc-status), never a bare 502 or 504.
// outcome, if set, is the retry hook's.
func (g *grpcForwarder) answerError(w http.ResponseWriter, r *http.Request, ctx context.Context,
	pol *retrypolicy.Policy, attempts int, outcome retrypolicy.Outcome, err error) {
	if r.Context().Err() != nil {
		return // the app is gone: nothing to answer
	}
	code, msg := grpcUnavailable, "retry-sidecar: upstream unavailable"
	if outcome == "" {
		outcome = retrypolicy.OutcomeUpstreamError
	}
	switch {
	case ctx.Err() != nil, outcome == retrypolicy.OutcomeDeadlineExceeded:
		code, outcome, msg = grpcDeadlineExceeded, retrypolicy.OutcomeDeadlineExceeded, "retry-sidecar: deadline exceeded"
	case errors.Is(err, errPerTryTimeout):
		code, msg = grpcDeadlineExceeded, err.Error()
	case errors.Is(err, errLoop), errors.Is(err, errGRPCShed), errors.Is(err, errGRPCDeferred), errors.Is(err, errGRPCHeld):
		msg = err.Error()
	case errors.Is(err, retryhttp.ErrUntrustedCertificate):
		msg = "retry-sidecar: the upstream's TLS certificate did not verify: " + untrustedReason(err)
	}
	g.log.Debug("gRPC call got no answer", "path", r.URL.Path, "outcome", string(outcome), "policy", pol != nil)
	grpcAnswer(w, code, msg, outcome, attempts)
}

// grpcAnswer writes a Trailers-Only gRPC answer: HTTP 200, the status, the
// outcome and the attempts, all in the one HEADERS frame that ends the stream.
func grpcAnswer(w http.ResponseWriter, code int, msg string, outcome retrypolicy.Outcome, attempts int) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	setGRPCStatus(h, "", code, msg)
	setOutcome(h, "", outcome, attempts)
	w.WriteHeader(http.StatusOK)
}

func setGRPCStatus(h http.Header, prefix string, code int, msg string) {
	h[prefix+"Grpc-Status"] = []string{strconv.Itoa(code)}
	h[prefix+"Grpc-Message"] = []string{grpcEncodeMessage(msg)}
}

// setOutcome sets x-retry-outcome and x-retry-attempts, in the headers
// (prefix "") or the trailers (http.TrailerPrefix).
func setOutcome(h http.Header, prefix string, outcome retrypolicy.Outcome, attempts int) {
	kOutcome, kAttempts := retryhttp.HeaderOutcome, retryhttp.HeaderAttempts
	if prefix != "" {
		kOutcome, kAttempts = trailerName(kOutcome), trailerName(kAttempts)
	}
	v := []string{string(outcome), itoa(attempts)} // one allocation for both
	h[kOutcome], h[kAttempts] = v[:1:1], v[1:]
}

// trailerName is http.TrailerPrefix+k, the key of trailer k in a
// ResponseWriter's header map, without a new string per call for the
// trailers every gRPC answer carries (BenchmarkHeldAnswer).
func trailerName(k string) string {
	switch k {
	case "Grpc-Status":
		return http.TrailerPrefix + "Grpc-Status"
	case "Grpc-Message":
		return http.TrailerPrefix + "Grpc-Message"
	case retryhttp.HeaderOutcome:
		return http.TrailerPrefix + retryhttp.HeaderOutcome
	case retryhttp.HeaderAttempts:
		return http.TrailerPrefix + retryhttp.HeaderAttempts
	}
	return http.TrailerPrefix + k
}

// grpcEncodeMessage percent-encodes a grpc-message as the gRPC HTTP/2
// protocol asks: bytes outside printable ASCII, and '%'.
func grpcEncodeMessage(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// parseGRPCTimeout reads a grpc-timeout header (retrypolicy.ParseGRPCTimeout).
func parseGRPCTimeout(v string) (time.Duration, bool) {
	d, err := retrypolicy.ParseGRPCTimeout(v)
	return d, err == nil
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
