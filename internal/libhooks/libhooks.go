// Package libhooks gives the sidecar the few methods of pkg/ it needs that
// are not the library's API (docs/library.md): calling a retryhttp.Transport
// with the policy already looked up, sharing its replay memory, and building
// the sidecar's SERVER spans with pkg/retryotel's span builder. Each
// variable is set by the package that owns the method, in its init, so it is
// ready wherever that package is linked in; a public package never names a
// type of this one (TestPublicAPINamesNoInternalType in pkg/retrypolicy).
//
// It imports nothing pkg/retrypolicy's packages may not (retryhttp sets
// RoundTripPolicy here), so OpenTelemetry's types appear as any.
package libhooks

import (
	"context"
	"net/http"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// RoundTripPolicy is rt.RoundTrip, rt a *retryhttp.Transport, with the
// policy p already looked up (nil: the request passes straight through): a
// caller that also acts on whether a request has one (the sidecar's
// pass-through accounting, a span naming the upstream) looks it up once, and
// both act on the same answer even when a reload swaps the policies in
// between. Set by package retryhttp.
var RoundTripPolicy func(rt http.RoundTripper, req *http.Request, p *retrypolicy.Policy) (*http.Response, error)

// TryReserveReplayMemory reserves n bytes of m, a *retryhttp.ReplayMemory
// (nil: no cap), if they fit under its cap; ReleaseReplayMemory gives n back.
// The sidecar's gRPC replay buffers (internal/sidecar) take their bytes from
// the same --max-replay-memory as the HTTP path's. Set by package retryhttp.
var (
	TryReserveReplayMemory func(m any, n int64) bool
	ReleaseReplayMemory    func(m any, n int64)
)

// NewTracer is pkg/retryotel's span builder over tp, a
// trace.TracerProvider, with every attribute value taken from the network
// cut to valueLimit bytes. Its value is also the retryhttp.Observer that
// ends the attempt spans. Set by package retryotel.
var NewTracer func(tp any, valueLimit int) Tracer

// Tracer is pkg/retryotel's span builder as the sidecar drives it: the
// Observer of its retryhttp.Transport, the wrapper of its Inner, and the
// SERVER span of each proxied request.
type Tracer interface {
	// WrapInner returns inner (nil: http.DefaultTransport) wrapped so that
	// each attempt of a traced request is a CLIENT span whose context the
	// upstream receives as its traceparent.
	WrapInner(inner http.RoundTripper) http.RoundTripper
	// StartServer starts the SERVER span of a request the sidecar proxies,
	// a child of the span context in ctx; policy and upstream name what
	// retries it ("" for none). It returns the context to send the request
	// with and its Span, or ctx and nil when the sampler did not record it.
	StartServer(ctx context.Context, method, policy, upstream string) (context.Context, Span)
}

// Span is the span of one logical request.
type Span interface {
	// End ends it, status being what the caller was answered (0: nothing).
	End(status int)
}
