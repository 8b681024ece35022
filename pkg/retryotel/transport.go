package retryotel

import (
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Transport traces the requests of an in-process retryhttp.Transport: one
// INTERNAL span per logical request (from RoundTrip to the response head)
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
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	r.End(status)
	return resp, err
}
