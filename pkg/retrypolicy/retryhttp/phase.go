package retryhttp

import (
	"context"
	"errors"
	"net"
	"time"
)

// Phase names where a timeout happened (docs/retry-semantics.md#timeouts):
// connection establishment, the TLS handshake, the wait for response headers,
// and admission are different budgets with different next steps, so a timeout
// always says which one ran out. It is the log field `phase`, the label of
// retry_sidecar_timeouts_total and the X-Retry-Timeout-Phase header.
type Phase string

const (
	// PhaseQueue: the wait for admission (concurrency queue or rate limit).
	PhaseQueue Phase = "queue"
	// PhaseConnect: the dial (connectTimeout, or the attempt's bound during the dial).
	PhaseConnect Phase = "connect"
	// PhaseTLS: the TLS handshake of a new connection.
	PhaseTLS Phase = "tls"
	// PhaseHeaders: the wait for the response headers (perTryTimeout, or the deadline).
	PhaseHeaders Phase = "headers"
)

// PhaseError tags an upstream client's error with the phase it happened in. A
// client that dials TLS returns its handshake failures as PhaseError{PhaseTLS}
// and its dial failures as PhaseError{PhaseConnect}, so a timeout there is
// reported in the right phase. Unwrap gives the original error (a dial error
// stays a *net.OpError with Op "dial" for errors.As).
type PhaseError struct {
	Phase Phase
	Err   error
}

func (e *PhaseError) Error() string { return string(e.Phase) + ": " + e.Err.Error() }
func (e *PhaseError) Unwrap() error { return e.Err }

// connectTimeoutKey carries the attempt's connect timeout in its context.
type connectTimeoutKey struct{}

// ConnectTimeout is the dial bound the Transport put into an attempt's context
// (the policy's connectTimeout); ok is false outside an attempt. Upstream
// clients bound their dial (and TLS handshake) by it.
func ConnectTimeout(ctx context.Context) (d time.Duration, ok bool) {
	d, ok = ctx.Value(connectTimeoutKey{}).(time.Duration)
	return d, ok
}

// attemptContext is an attempt's context: its cancellation plus the connect
// timeout, in one value that lives inside the call (no allocation of its own).
type attemptContext struct {
	context.Context
	connectTimeout time.Duration
}

func (c *attemptContext) Value(key any) any {
	if key == (connectTimeoutKey{}) {
		return c.connectTimeout
	}
	return c.Context.Value(key)
}

// timeoutPhase says in which phase an attempt without a response timed out,
// or "" if the failure was not a timeout. fired says the attempt's own bound
// (perTryTimeout or deadline) ended it.
func timeoutPhase(err error, fired bool) Phase {
	var pe *PhaseError
	tagged := errors.As(err, &pe)
	var op *net.OpError
	dial := errors.As(err, &op) && op.Op == "dial"
	if !fired && !isTimeout(err) {
		return ""
	}
	switch {
	case tagged:
		return pe.Phase
	case dial:
		return PhaseConnect
	case fired:
		return PhaseHeaders
	}
	return ""
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
