package retryotel

import (
	"io"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Transport traces the requests of an in-process retryhttp.Transport: one
// INTERNAL span per logical request (from RoundTrip until its response body
// is read to its end or closed)
// and under it one CLIENT span per attempt, built by the same Tracer as the
// sidecar's spans (docs/observability.md#tracing).
type Transport struct {
	rt     *retryhttp.Transport
	tracer *Tracer
}

// NewTransport hooks a Tracer over tp into rt, keeping rt's Inner and
// Observer, and returns the RoundTripper to send requests with. Call it
// before rt's first use; rt is then used through the returned Transport only.
func NewTransport(rt *retryhttp.Transport, tp trace.TracerProvider) *Transport {
	t := NewTracer(tp)
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
	p := t.rt.Policy(req)
	upstream := ""
	if p != nil {
		upstream = p.Name()
	}
	ctx, r := t.tracer.Start(req.Context(), trace.SpanKindInternal, req.Method, "", upstream)
	if r == nil {
		return t.rt.RoundTripPolicy(req, p)
	}
	resp, err := t.rt.RoundTripPolicy(req.WithContext(ctx), p)
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
	r      *Request
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
