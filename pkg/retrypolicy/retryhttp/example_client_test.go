package retryhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// An http.Client that retries in-process as the sidecar does (README.md,
// docs/library.md): a policy compiled once, routed to by the request's host.
func Example() {
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first answer is retried
		}
	}))
	defer upstream.Close()
	host := strings.TrimPrefix(upstream.URL, "http://")

	p, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "payments-api", Hosts: []string{host},
		MaxAttempts: 4, Deadline: 30 * time.Second,
		Backoff:       retrypolicy.Backoff{Base: 100 * time.Millisecond, Max: 8 * time.Second, Jitter: retrypolicy.JitterFull},
		RetryOnStatus: []int{429, 503}, RetryOn: retrypolicy.RetryConnectFailure,
		ReplayableMethods: []string{"GET", "HEAD", "OPTIONS"}, IdempotencyKeyHeader: "Idempotency-Key",
		MaxReplayBodyBytes: 64 << 10, RetryAfterMaxWait: 30 * time.Second, RetryAfterSpread: time.Second,
	})
	if err != nil {
		panic(err) // a field out of range, named by its path: "backoff.max: must be >= backoff.base (1s)"
	}
	client := &http.Client{Transport: &retryhttp.Transport{Route: retryhttp.Static(p)}}
	resp, err := client.Get(upstream.URL + "/v1/charges/42")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("X-Retry-Outcome"), resp.Header.Get("X-Retry-Attempts"))
	// Output: 200 success 2
}
