package retryhttp

import (
	"context"
	"errors"
	"time"
)

// What a Transport and the client it drives as Inner agree on beyond
// http.RoundTripper, for a client that wants its failures reported as
// precisely as the Transport can (docs/retry-semantics.md#timeouts,
// #unrelayable-responses, docs/tls.md). A standard http.Transport needs none
// of it: the Transport tells its dial and DNS errors from failures after the
// request was written by itself. The sidecar's own HTTP/1.1 client is written
// to this contract.
//
//   - Bound a new connection's dial and TLS handshake by ConnectTimeout(ctx),
//     the policy's connectTimeout, when the request's context carries one.
//   - Return a failure to connect as a *PhaseError with PhaseConnect or
//     PhaseTLS: a timeout there is reported in that phase, and the failure
//     counts as nothing sent (retryOn.connectFailure).
//   - Wrap ErrMalformedResponse or ErrUntrustedCertificate (errors.Is) into
//     an answer that cannot be relayed or a certificate that did not verify:
//     neither is ever retried, and the request ends upstream-error.

// ConnectTimeout is the bound the Transport puts into each attempt's context
// for the dial and TLS handshake of a new connection (the policy's
// connectTimeout); ok is false outside an attempt. It does not allocate.
func ConnectTimeout(ctx context.Context) (d time.Duration, ok bool) {
	d, ok = ctx.Value(connectTimeoutKey{}).(time.Duration)
	return d, ok
}

// connectTimeoutKey is the context key of an attempt's connect timeout.
type connectTimeoutKey struct{}

// PhaseError tags an Inner client's failure with the phase it happened in:
// a client that dials TLS returns its dial failures as
// &PhaseError{PhaseConnect, err} and its handshake failures as
// &PhaseError{PhaseTLS, err}. Unwrap gives err (a dial error stays a
// *net.OpError with Op "dial" for errors.As).
type PhaseError struct {
	Phase Phase
	Err   error
}

func (e *PhaseError) Error() string { return string(e.Phase) + ": " + e.Err.Error() }
func (e *PhaseError) Unwrap() error { return e.Err }

// Errors an Inner client wraps to say what went wrong; the Transport never
// retries either and ends the request with outcome upstream-error.
var (
	// ErrMalformedResponse marks an upstream answer that cannot be relayed as
	// an HTTP response: a malformed head, a status outside 100–999.
	ErrMalformedResponse = errors.New("malformed upstream response")
	// ErrUntrustedCertificate marks a TLS handshake that failed because the
	// upstream's certificate did not verify (unknown authority, a name it is
	// not valid for, expired), wrapped together with the verification error.
	// Other handshake failures are connect failures: nothing was sent.
	ErrUntrustedCertificate = errors.New("upstream certificate did not verify")
)
