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
