// Package otlpreceiver is a small OTLP trace receiver: the collector's
// TraceService over HTTP/protobuf (POST /v1/traces) and gRPC, keeping every
// span it receives, and a text rendering of a trace as a span tree. The
// sidecar's tracing tests and `make demo` use it as their tracing backend
// (docs/observability.md#tracing).
package otlpreceiver

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"sync"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span with the service.name of its resource.
type Span struct {
	*tracepb.Span
	Service string
}

// Receiver keeps the spans it is sent. Safe for concurrent use.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer

	// OnExport, if set, is called with each export request before it is
	// kept: a test makes the collector slow or down with it. A non-nil error
	// refuses the export.
	OnExport func(ctx context.Context) error

	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced when spans arrive
}

// New returns an empty Receiver.
func New() *Receiver { return &Receiver{changed: make(chan struct{})} }

// Export implements the gRPC TraceService.
func (r *Receiver) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	if r.OnExport != nil {
		if err := r.OnExport(ctx); err != nil {
			return nil, err
		}
	}
	r.keep(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// RegisterGRPC serves the TraceService on s.
func (r *Receiver) RegisterGRPC(s *grpc.Server) { collectorpb.RegisterTraceServiceServer(s, r) }

// ServeHTTP implements the OTLP/HTTP binary protobuf encoding of POST /v1/traces.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 16<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.OnExport != nil {
		if err := r.OnExport(req.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	r.keep(&msg)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) keep(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: s, Service: service})
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// Spans are the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the spans once done(spans) holds, or what there is when ctx ends.
func (r *Receiver) Wait(ctx context.Context, done func([]Span) bool) []Span {
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return spans
		}
	}
}
