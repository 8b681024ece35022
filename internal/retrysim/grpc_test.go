package retrysim

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// grpcConfig retries UNAVAILABLE of one method, with a backoff without
// jitter and no spread, so every wait below is computed by hand: 100ms,
// 200ms, 400ms, or the pushback when it is longer.
func grpcConfig() retrypolicy.Config {
	return retrypolicy.Config{
		Name: "payments-grpc", Hosts: []string{"payments-grpc.shop.svc:50051"}, MaxAttempts: 4, Deadline: 10 * time.Second,
		Backoff:           retrypolicy.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: retrypolicy.JitterNone},
		RetryOnGRPCStatus: []uint32{14}, ReplayableMethods: []string{"/shop.v1.Payments/GetPayment"},
		RetryAfterMaxWait: 2 * time.Second,
	}
}

type grpcCase struct {
	method    string // default /shop.v1.Payments/GetPayment
	responses string
	config    func(*retrypolicy.Config)
	header    http.Header
	steps     []Step
	outcome   string
	status    string
	trailers  map[string]string
}

var grpcCases = map[string]grpcCase{
	"the manual's example: a backoff, then the pushback as the exact minimum, then OK": {
		responses: "UNAVAILABLE, UNAVAILABLE pushback=800, OK",
		steps: []Step{
			{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "retry", Wait: "100ms", Backoff: "100ms", WaitBy: "backoff"},
			{N: 2, At: "100ms", Response: "UNAVAILABLE pushback=800", Decision: "retry", Wait: "800ms", Pushback: "800ms",
				Backoff: "200ms", WaitBy: "pushback"},
			{N: 3, At: "900ms", Response: "OK", Decision: "stop", Outcome: "success"},
		},
		outcome: "success", status: "OK", trailers: map[string]string{"x-retry-attempts": "3", "x-retry-outcome": "success"},
	},
	"a pushback shorter than the backoff waits the backoff": {
		responses: "UNAVAILABLE, UNAVAILABLE, UNAVAILABLE pushback=300, OK",
		steps: []Step{
			{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "retry", Wait: "100ms", Backoff: "100ms", WaitBy: "backoff"},
			{N: 2, At: "100ms", Response: "UNAVAILABLE", Decision: "retry", Wait: "200ms", Backoff: "200ms", WaitBy: "backoff"},
			{N: 3, At: "300ms", Response: "UNAVAILABLE pushback=300", Decision: "retry", Wait: "400ms", Pushback: "300ms",
				Backoff: "400ms", WaitBy: "backoff"},
			{N: 4, At: "700ms", Response: "OK", Decision: "stop", Outcome: "success"},
		},
		outcome: "success", status: "OK", trailers: map[string]string{"x-retry-attempts": "4", "x-retry-outcome": "success"},
	},
	"a pushback longer than maxWait is deferred, not before the server's time": {
		responses: "UNAVAILABLE pushback=2001",
		steps: []Step{{N: 1, At: "0s", Response: "UNAVAILABLE pushback=2001", Decision: "defer", Outcome: "deferred",
			NotBefore: "2.001s", Pushback: "2.001s"}},
		outcome: "deferred", status: "UNAVAILABLE", trailers: map[string]string{"grpc-retry-pushback-ms": "2001",
			"x-retry-attempts": "1", "x-retry-outcome": "deferred", "x-retry-not-before": "Mon, 30 Nov 2026 12:00:03 GMT"},
	},
	"a negative pushback is the server asking for no retry": {
		responses: "UNAVAILABLE pushback=-1, OK",
		steps: []Step{{N: 1, At: "0s", Response: "UNAVAILABLE pushback=-1", Decision: "stop", Outcome: "not-retryable",
			PushbackReason: "negative"}},
		outcome: "not-retryable", status: "UNAVAILABLE",
		trailers: map[string]string{"grpc-retry-pushback-ms": "-1", "x-retry-attempts": "1", "x-retry-outcome": "not-retryable"},
	},
	"a method replayableMethods does not list is never sent twice": {
		method: "/shop.v1.Payments/Charge", responses: "UNAVAILABLE, OK",
		steps:   []Step{{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "stop", Outcome: "not-replayable"}},
		outcome: "not-replayable", status: "UNAVAILABLE",
		trailers: map[string]string{"x-retry-attempts": "1", "x-retry-outcome": "not-replayable"},
	},
	"a status retryOn.grpcStatusCodes does not list is given back": {
		responses: "RESOURCE_EXHAUSTED pushback=100, OK",
		steps: []Step{{N: 1, At: "0s", Response: "RESOURCE_EXHAUSTED pushback=100", Decision: "stop", Outcome: "not-retryable",
			Pushback: "100ms"}},
		outcome: "not-retryable", status: "RESOURCE_EXHAUSTED",
		trailers: map[string]string{"grpc-retry-pushback-ms": "100", "x-retry-attempts": "1", "x-retry-outcome": "not-retryable"},
	},
	"a call that came with x-retry-attempt gets one attempt": {
		responses: "UNAVAILABLE, OK", header: http.Header{"X-Retry-Attempt": {"1"}},
		steps:   []Step{{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "stop", Outcome: "exhausted"}},
		outcome: "exhausted", status: "UNAVAILABLE", trailers: map[string]string{"x-retry-attempts": "1", "x-retry-outcome": "exhausted"},
	},
	"a retry waits for a rateLimit token as well, shown as admission": {
		responses: "UNAVAILABLE, OK",
		config: func(c *retrypolicy.Config) {
			c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 2, Burst: 1}
		},
		steps: []Step{
			{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "retry", Wait: "100ms", Backoff: "100ms", WaitBy: "backoff"},
			{N: 2, At: "500ms", Response: "OK", Decision: "stop", Outcome: "success", Admission: "400ms"},
		},
		outcome: "success", status: "OK", trailers: map[string]string{"x-retry-attempts": "2", "x-retry-outcome": "success"},
	},
	"an attempt admission cannot fit before the deadline is not sent: shed": {
		responses: "UNAVAILABLE, OK",
		config: func(c *retrypolicy.Config) {
			c.Deadline = time.Second
			c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 1, Burst: 1}
		},
		steps: []Step{
			{N: 1, At: "0s", Response: "UNAVAILABLE", Decision: "retry", Wait: "100ms", Backoff: "100ms", WaitBy: "backoff"},
			{N: 2, At: "100ms", Response: "(not sent)", Decision: "stop", Outcome: "shed", NotBefore: "1s"},
		},
		outcome: "shed", status: "UNAVAILABLE", trailers: map[string]string{"x-retry-attempts": "1", "x-retry-outcome": "shed",
			"x-retry-not-before": "Mon, 30 Nov 2026 12:00:01 GMT"},
	},
}

func TestSimulateGRPC(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for name, tc := range grpcCases {
		t.Run(name, func(t *testing.T) {
			cfg := grpcConfig()
			if tc.config != nil {
				tc.config(&cfg)
			}
			p, err := retrypolicy.Compile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			script, err := ParseResponses(tc.responses)
			if err != nil {
				t.Fatal(err)
			}
			method := tc.method
			if method == "" {
				method = "/shop.v1.Payments/GetPayment"
			}
			res, err := SimulateGRPC(GRPCInput{Policy: p, Method: method, Metadata: tc.header, Responses: script, Seed: 1, Start: start})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.steps, res.Attempts, cmpopts.IgnoreUnexported(Step{})); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if res.Outcome != tc.outcome || res.Status != tc.status {
				t.Errorf("outcome %s, status %s; want %s, %s", res.Outcome, res.Status, tc.outcome, tc.status)
			}
			if diff := cmp.Diff(tc.trailers, res.Trailers); diff != "" {
				t.Errorf("trailers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSimulateGRPCSaysWhenTheScriptRunsOut(t *testing.T) {
	p, err := retrypolicy.Compile(grpcConfig())
	if err != nil {
		t.Fatal(err)
	}
	script, _ := ParseResponses("UNAVAILABLE")
	_, err = SimulateGRPC(GRPCInput{Policy: p, Method: "/shop.v1.Payments/GetPayment", Responses: script})
	if !errors.Is(err, ErrRanOut) || err.Error() != "--responses: ran out of responses: the policy made attempt 2; "+
		"add what the upstream answers next" {
		t.Fatalf("got %v, want ErrRanOut naming attempt 2", err)
	}
}
