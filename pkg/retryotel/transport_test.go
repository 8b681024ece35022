package retryotel_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// The request span of an in-process Transport ends when the caller is done
// with the response body (read to its end, or closed), not at the response
// head: it covers the time the body took. A request that got no response
// ends at once.
func TestRequestSpanEndsWithTheBody(t *testing.T) {
	for name, tc := range map[string]struct {
		method string
		finish func(t *testing.T, body io.ReadCloser) // after the whole body was sent
		upDown bool                                   // the upstream is gone: no response
		atHead bool                                   // the request span has ended when RoundTrip returns
		status string                                 // the request span's http.response.status_code
	}{
		"a body read to its end": {method: http.MethodGet, status: "200", finish: func(t *testing.T, body io.ReadCloser) {
			if b, err := io.ReadAll(body); err != nil || string(b) != "head and tail" {
				t.Errorf("body %q, %v; want %q", b, err, "head and tail")
			}
		}},
		"a body closed before its end": {method: http.MethodGet, status: "200", finish: func(t *testing.T, body io.ReadCloser) {
			body.Close()
		}},
		"the empty body of a HEAD request, closed": {method: http.MethodHead, status: "200", finish: func(t *testing.T, body io.ReadCloser) {
			body.Close()
		}},
		"no response at all": {method: http.MethodGet, upDown: true, atHead: true, status: ""},
	} {
		t.Run(name, func(t *testing.T) {
			tail := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "head ")
				w.(http.Flusher).Flush()
				<-tail
				io.WriteString(w, "and tail")
			}))
			defer up.Close()
			defer close(tail) // before the server closes: a test that stopped early frees the handler
			url := up.URL
			if tc.upDown {
				url = "http://" + closedPort(t)
			}
			recorder := tracetest.NewSpanRecorder()
			rt := retryotel.NewTransport(&retryhttp.Transport{Route: retryhttp.Static(onePolicy(t))},
				sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, url+"/report", nil)
			resp, err := rt.RoundTrip(req)
			if (err != nil) != tc.upDown {
				t.Fatalf("RoundTrip error %v, want one: %v", err, tc.upDown)
			}
			if got := requestSpans(recorder); len(got) != map[bool]int{true: 1, false: 0}[tc.atHead] {
				t.Fatalf("%d request spans ended when the response head came, want %v", len(got), tc.atHead)
			}
			if tc.finish != nil {
				tail <- struct{}{}
				tc.finish(t, resp.Body)
			} else if resp != nil {
				resp.Body.Close()
			}
			got := requestSpans(recorder)
			if len(got) != 1 {
				t.Fatalf("%d request spans ended, want 1", len(got))
			}
			if s := statusOf(got[0]); s != tc.status {
				t.Errorf("the request span's status code %q, want %q", s, tc.status)
			}
			if tc.finish != nil {
				resp.Body.Close() // again: the span ended once
				if n := len(requestSpans(recorder)); n != 1 {
					t.Errorf("%d request spans after a second Close, want 1", n)
				}
			}
		})
	}
}

func onePolicy(t *testing.T) *retrypolicy.Policy {
	p, err := retrypolicy.Compile(retrypolicy.Config{Name: "reports", Hosts: []string{"127.0.0.1"}, MaxAttempts: 1,
		Deadline: 10 * time.Second, ReplayableMethods: []string{"GET", "HEAD"},
		Backoff: retrypolicy.Backoff{Base: time.Millisecond, Max: time.Millisecond, Jitter: retrypolicy.JitterNone}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// requestSpans are the ended INTERNAL spans.
func requestSpans(r *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.SpanKind() == trace.SpanKindInternal {
			out = append(out, s)
		}
	}
	return out
}

func statusOf(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == retryotel.AttrStatus {
			return kv.Value.String()
		}
	}
	return ""
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Every value a span takes from the network is valid UTF-8 of at most the
// limit's bytes (docs/observability.md#what-a-span-holds), in-process as in
// the sidecar: the method, and the Server and Via the upstream answered.
func TestValuesFromTheNetworkAreBounded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "evil\xff")
		w.Header()["Via"] = []string{strings.Repeat("v", 20), strings.Repeat("w", 20)}
	}))
	defer up.Close()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	rt := retryotel.NewTransport(&retryhttp.Transport{Route: retryhttp.Static(onePolicy(t))}, tp, retryotel.WithValueLimit(32))
	method := "PURGE" + strings.Repeat("X", 100)
	req, _ := http.NewRequest(method, up.URL+"/report", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	want := map[trace.SpanKind]map[attribute.Key]attribute.Value{
		trace.SpanKindInternal: {retryotel.AttrMethod: attribute.StringValue(method[:32])},
		trace.SpanKindClient: {retryotel.AttrMethod: attribute.StringValue(method[:32]),
			retryotel.AttrHeaderServer: attribute.StringSliceValue([]string{"evil\uFFFD"}),
			retryotel.AttrHeaderVia:    attribute.StringSliceValue([]string{strings.Repeat("v", 20), strings.Repeat("w", 12)})},
	}
	spans := recorder.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		if s.Name() != method[:32] {
			t.Errorf("%s span named %q, want the method's first 32 bytes", s.SpanKind(), s.Name())
		}
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value
		}
		for k, v := range want[s.SpanKind()] {
			if got[k].String() != v.String() {
				t.Errorf("%s span: %s = %q, want %q", s.SpanKind(), k, got[k].String(), v.String())
			}
		}
	}
}
