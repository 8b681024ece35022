package retryotel

import (
	"io"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/libhooks"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Transport traces the requests of an in-process retryhttp.Transport: one
// INTERNAL span per logical request (from RoundTrip until its response body
// is read to its end or closed)
// and under it one CLIENT span per attempt, built by the same code as the
// sidecar's spans (docs/observability.md#tracing).
type Transport struct {
	rt     *retryhttp.Transport
	tracer *tracer
}

// NewTransport hooks spans over tp into rt, keeping rt's Inner and
// Observer, and returns the RoundTripper to send requests with. tp's sampler
// decides which requests are recorded. Values taken from the network are cut
// to the limit the environment sets (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT,
// else OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT; DefaultValueLimit when it sets none
// or one that is not a positive integer) unless an option says otherwise.
// Call it before rt's first use; rt is then used through the returned
// Transport only.
func NewTransport(rt *retryhttp.Transport, tp trace.TracerProvider, opts ...Option) *Transport {
	t := newTracer(tp, valueLimit(opts))
	rt.Inner = t.WrapInner(rt.Inner)
	if rt.Observer != nil {
		rt.Observer = retryhttp.Observers{rt.Observer, t}
	} else {
		rt.Observer = t
	}
	return &Transport{rt: rt, tracer: t}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var p *retrypolicy.Policy
	if t.rt.Route != nil {
		p = t.rt.Route(req)
	}
	upstream := ""
	if p != nil {
		upstream = p.Name()
	}
	ctx, r := t.tracer.start(req.Context(), trace.SpanKindInternal, req.Method, "", upstream)
	if r == nil {
		return libhooks.RoundTripPolicy(t.rt, req, p)
	}
	resp, err := libhooks.RoundTripPolicy(t.rt, req.WithContext(ctx), p)
	switch {
	case resp == nil:
		r.End(0)
	case resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols:
		r.End(resp.StatusCode) // nothing more to wait for (an upgraded connection is the caller's)
	default:
		resp.Body = &spanBody{ReadCloser: resp.Body, r: r, status: resp.StatusCode}
	}
	return resp, err
}

// spanBody is the body of a traced response: the request span ends when
// the caller has read it to its end (or an error) or closed it, whichever
// comes first, so the span covers the time the body took.
type spanBody struct {
	io.ReadCloser
	r      *request
	status int
	ended  atomic.Bool // Close may race a Read
}

// Read implements io.Reader.
func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end()
	}
	return n, err
}

// Close implements io.Closer.
func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

func (b *spanBody) end() {
	if b.ended.CompareAndSwap(false, true) {
		b.r.End(b.status)
	}
}
