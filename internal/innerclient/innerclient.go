// Package innerclient is what retryhttp.Transport and an upstream client it
// drives as its Inner (internal/h1client, the sidecar's) agree on beyond
// http.RoundTripper: the connect timeout an attempt's context carries, the
// phase a failure happened in, and the two failures that are never retried
// (docs/retry-semantics.md#timeouts, #unrelayable-responses, docs/tls.md). A
// standard http.Transport needs none of it: the Transport tells a dial or DNS
// error of any client from one after the request was written by itself.
package innerclient

import (
	"context"
	"errors"
	"time"
)

// ConnectTimeoutKey is the context key of an attempt's connect timeout (a
// time.Duration): the Transport answers it from the attempt's context without
// allocating.
type ConnectTimeoutKey struct{}

// ConnectTimeout is the dial bound the Transport put into an attempt's context
// (the policy's connectTimeout); ok is false outside an attempt. Upstream
// clients bound their dial (and TLS handshake) by it.
func ConnectTimeout(ctx context.Context) (d time.Duration, ok bool) {
	d, ok = ctx.Value(ConnectTimeoutKey{}).(time.Duration)
	return d, ok
}

// The phases an upstream client tags its failures with: the values of
// retryhttp.PhaseConnect and retryhttp.PhaseTLS.
const (
	PhaseConnect = "connect"
	PhaseTLS     = "tls"
)

// PhaseError tags an upstream client's error with the phase it happened in. A
// client that dials TLS returns its handshake failures as PhaseError{PhaseTLS}
// and its dial failures as PhaseError{PhaseConnect}, so a timeout there is
// reported in the right phase and the failure counts as nothing sent. Unwrap
// gives the original error (a dial error stays a *net.OpError with Op "dial"
// for errors.As).
type PhaseError struct {
	Phase string
	Err   error
}

func (e *PhaseError) Error() string { return e.Phase + ": " + e.Err.Error() }
func (e *PhaseError) Unwrap() error { return e.Err }

// Errors an upstream client wraps (errors.Is) to say what went wrong; the
// Transport never retries either and ends the request with outcome
// upstream-error.
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
