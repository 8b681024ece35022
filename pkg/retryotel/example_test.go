package retryotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrydev/retry-operator/pkg/retryotel"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// An in-process retryhttp.Transport traced through a TracerProvider: one
// INTERNAL span for the request, one CLIENT span per attempt, the wait an
// event. The upstream answers 503 with Retry-After: 0, then 200.
func ExampleNewTransport() {
	calls := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls++; calls == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Server", "payments-api")
	}))
	defer upstream.Close()

	p, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "payments-api", Hosts: []string{"127.0.0.1"}, MaxAttempts: 3, Deadline: 10 * time.Second,
		Backoff:       retrypolicy.Backoff{Base: time.Millisecond, Max: time.Millisecond, Jitter: retrypolicy.JitterNone},
		RetryOnStatus: []int{503}, ReplayableMethods: []string{"GET"}, RetryAfterMaxWait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	client := &http.Client{Transport: retryotel.NewTransport(&retryhttp.Transport{Route: retryhttp.Static(p)}, tp)}

	req, _ := http.NewRequestWithContext(context.Background(), "GET", upstream.URL+"/v1/charges/42", nil)
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	for _, s := range recorder.Ended() {
		fmt.Print(s.SpanKind(), " ", s.Name())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case retryotel.AttrResendCount, retryotel.AttrStatus, retryotel.AttrOutcome, retryotel.AttrAttempts,
				retryotel.AttrErrorType, retryotel.AttrHeaderServer:
				fmt.Print(" ", kv.Key, "=", kv.Value.String())
			}
		}
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				if kv.Key == retryotel.AttrReason {
					fmt.Print(" [", e.Name, " ", kv.Value.String(), "]")
				}
			}
		}
		fmt.Println()
	}
	// Output:
	// client GET http.response.status_code=503 error.type=503
	// client GET http.request.resend_count=1 http.response.status_code=200 http.response.header.server=["payments-api"]
	// internal GET retry.outcome=success retry.attempts=2 http.response.status_code=200 [retry.wait retry_after]
}
