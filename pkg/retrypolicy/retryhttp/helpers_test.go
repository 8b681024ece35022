package retryhttp

import (
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// baseConfig is a valid upstream: 4 attempts, 30s deadline, Equal backoff 1s..8s,
// 429/503, connect failures, GET/HEAD/OPTIONS, Idempotency-Key, maxWait 30s, no
// spread (the decision tests of package retrypolicy use the same one).
func baseConfig() retrypolicy.Config {
	return retrypolicy.Config{
		Name:                 "payments-api",
		Hosts:                []string{"payments.shop.svc"},
		MaxAttempts:          4,
		Deadline:             30 * time.Second,
		Backoff:              retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterEqual},
		RetryOnStatus:        []int{429, 503},
		RetryOn:              retrypolicy.RetryConnectFailure | retrypolicy.RetryResetBeforeHeaders,
		ReplayableMethods:    []string{"GET", "HEAD", "OPTIONS"},
		IdempotencyKeyHeader: "Idempotency-Key",
		MaxReplayBodyBytes:   64 << 10,
		RetryAfterMaxWait:    30 * time.Second,
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
