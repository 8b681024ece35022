package retrygrpc

import (
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// The metadata keys: the attempt number on each attempt (another retrying
// layer, such as the sidecar, sees it and does not multiply the attempts), and
// what the call came to in the trailer a caller asks for with grpc.Trailer.
// They are retryhttp's header names, in lower case as gRPC metadata keys are.
var (
	keyAttempt   = strings.ToLower(retryhttp.HeaderAttempt)
	keyOutcome   = strings.ToLower(retryhttp.HeaderOutcome)
	keyAttempts  = strings.ToLower(retryhttp.HeaderAttempts)
	keyNotBefore = strings.ToLower(retryhttp.HeaderNotBefore)
)

// pushbackKey is gRPC's trailer of the server's wait before a retry.
const pushbackKey = "grpc-retry-pushback-ms"

// Option configures UnaryClientInterceptor.
type Option func(*interceptor)

// WithClock sets the clock of every wait and deadline; the default is the
// real clock. clocktest's virtual clock tests a retry schedule without sleeping.
func WithClock(c clock.Clock) Option { return func(i *interceptor) { i.clk = c } }

// WithRandom sets the source of numbers in [0, 1] for the backoff jitter and
// the spread after a pushback; the default is math/rand/v2.
func WithRandom(f func() float64) Option { return func(i *interceptor) { i.random = f } }

// Report is what the interceptor did with one call (ReportTo): the
// transmissions made, the outcome, and for a deferred call the earliest time
// a retry is allowed, rounded up to the second as X-Retry-Not-Before is
// (docs/retry-semantics.md#outcomes).
type Report struct {
	Attempts  int
	Outcome   retrypolicy.Outcome
	NotBefore time.Time
}

// ReportTo is a grpc.CallOption that fills r when the call returns. A caller
// that passes grpc.Trailer gets the same in the trailer: x-retry-attempts,
// x-retry-outcome and x-retry-not-before (an IMF-fixdate), as from the sidecar.
func ReportTo(r *Report) grpc.CallOption { return reportOption{r: r} }

type reportOption struct {
	grpc.EmptyCallOption
	r *Report
}

// UnaryClientInterceptor returns an interceptor that retries the unary calls of
// a grpc.ClientConn by p. It is safe for concurrent use; p's limits (budget,
// admission) are shared by every call, as in the sidecar.
func UnaryClientInterceptor(p *retrypolicy.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	i := &interceptor{p: p, clk: clock.Real{}, random: rand.Float64}
	for _, o := range opts {
		o(i)
	}
	return i.intercept
}

type interceptor struct {
	p      *retrypolicy.Policy
	clk    clock.Clock
	random func() float64
}
