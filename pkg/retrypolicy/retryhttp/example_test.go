package retryhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// upstream answers 503 the first time and 200 after that.
type upstream struct{ calls int }

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.calls++
	status := http.StatusOK
	if u.calls == 1 {
		status = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// A Transport on a virtual clock: the wait between the attempts moves the
// clock instead of blocking, so the test takes no real time.
func ExampleTransport_virtualClock() {
	p, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "payments-api", Hosts: []string{"payments.shop.svc"},
		MaxAttempts: 4, Deadline: 30 * time.Second,
		Backoff:           retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterFull},
		RetryOnStatus:     []int{503},
		ReplayableMethods: []string{"GET"},
		RetryAfterMaxWait: 30 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktest.NewClock(start)
	tr := &retryhttp.Transport{
		Inner: &upstream{}, Route: retryhttp.Static(p), Clock: clk,
		Random: func() float64 { return 1 }, // full jitter at its ceiling: the first wait is Base
		Sleep: func(ctx context.Context, d time.Duration) error {
			clk.Advance(d)
			return ctx.Err()
		},
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://payments.shop.svc/v1/charges/42", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get(retryhttp.HeaderOutcome), resp.Header.Get(retryhttp.HeaderAttempts), clk.Now().Sub(start))
	// Output: 200 success 2 1s
}
