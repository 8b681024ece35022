package retryhttp

import (
	"runtime"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// baseConfig is a valid upstream: 4 attempts, 30s deadline, Equal backoff 1s..8s,
// 429/503, connect failures, GET/HEAD/OPTIONS, Idempotency-Key, maxWait 30s, no
// spread (the decision tests of package retrypolicy use the same one).
func baseConfig() retrypolicy.Config {
	return retrypolicy.Config{
		Name:                  "payments-api",
		Hosts:                 []string{"payments.shop.svc"},
		MaxAttempts:           4,
		Deadline:              30 * time.Second,
		Backoff:               retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterEqual},
		RetryOnStatus:         []int{429, 503},
		RetryOnConnectFailure: true,
		ReplayableMethods:     []string{"GET", "HEAD", "OPTIONS"},
		IdempotencyKeyHeader:  "Idempotency-Key",
		MaxReplayBodyBytes:    64 << 10,
		RetryAfterMaxWait:     30 * time.Second,
	}
}

func compile(t testing.TB, mutate func(*retrypolicy.Config)) *retrypolicy.Policy {
	t.Helper()
	c := baseConfig()
	if mutate != nil {
		mutate(&c)
	}
	p, err := retrypolicy.Compile(c)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// waitFor yields until cond holds: the code under test runs on another
// goroutine and is about to block on the virtual clock.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1_000_000; i++ {
		if cond() {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("timed out waiting for %s", what)
}

// timerSet is a waitFor condition: the code under test has set a timer on c.
func timerSet(c *clocktest.Clock) func() bool {
	return func() bool { return c.Pending() > 0 }
}
