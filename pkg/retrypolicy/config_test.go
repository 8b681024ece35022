package retrypolicy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

func TestCompileRejects(t *testing.T) {
	tests := map[string]struct {
		mutate func(*Config)
		want   string // the exact message of the (only) error
	}{
		"an empty name":                {func(c *Config) { c.Name = "" }, "name: must not be empty"},
		"no hosts":                     {func(c *Config) { c.Hosts = nil }, `hosts: must list at least one "host", "host:port" or "*.suffix"`},
		"an upper-case host":           {func(c *Config) { c.Hosts = []string{"a.example", "API.example"} }, `hosts[1]: must be lower-case (api.example): must be "host", "host:port" or "*.suffix" in lower case ("API.example")`},
		"port zero":                    {func(c *Config) { c.Hosts = []string{"a.example:0"} }, `hosts[0]: port must be a number between 1 and 65535: must be "host", "host:port" or "*.suffix" in lower case ("a.example:0")`},
		"a wildcard in the middle":     {func(c *Config) { c.Hosts = []string{"a.*.example"} }, `hosts[0]: a wildcard is only allowed as the whole first label ("*.suffix"): must be "host", "host:port" or "*.suffix" in lower case ("a.*.example")`},
		"zero attempts":                {func(c *Config) { c.MaxAttempts = 0 }, "maxAttempts: must be between 1 and 10 (transmissions including the first) (got 0)"},
		"eleven attempts":              {func(c *Config) { c.MaxAttempts = 11 }, "maxAttempts: must be between 1 and 10 (transmissions including the first) (got 11)"},
		"no deadline":                  {func(c *Config) { c.Deadline = 0 }, "deadline: must be > 0 (got 0s)"},
		"a per-try timeout = deadline": {func(c *Config) { c.PerTryTimeout = 30 * time.Second }, "perTryTimeout: must be < deadline (30s)"},
		"a negative per-try timeout":   {func(c *Config) { c.PerTryTimeout = -time.Second }, "perTryTimeout: must be >= 0, 0 = none (got -1s)"},
		"a zero base":                  {func(c *Config) { c.Backoff.Base = 0; c.Backoff.Max = 0 }, "backoff.base: must be > 0 (got 0s)"},
		"max below base":               {func(c *Config) { c.Backoff.Max = 500 * time.Millisecond }, "backoff.max: must be >= backoff.base (1s)"},
		"an unknown jitter":            {func(c *Config) { c.Backoff.Jitter = "full" }, `backoff.jitter: must be one of Full, Equal, None (got "full")`},
		"a 404 to retry":               {func(c *Config) { c.RetryOnStatus = []int{503, 404} }, "retryOn.statusCodes[1]: must be one of 408, 425, 429, 500, 502, 503, 504 (got 404)"},
		"POST as a replayable method":  {func(c *Config) { c.ReplayableMethods = []string{"GET", "POST"} }, `replayableMethods[1]: POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed (got "POST")`},
		"PATCH as a replayable method": {func(c *Config) { c.ReplayableMethods = []string{"PATCH"} }, `replayableMethods[0]: POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed (got "PATCH")`},
		"a lower-case method":          {func(c *Config) { c.ReplayableMethods = []string{"get"} }, `replayableMethods[0]: must be upper-case (GET); methods are case-sensitive (got "get")`},
		"a header name with a space":   {func(c *Config) { c.IdempotencyKeyHeader = "Idempotency Key" }, "idempotencyKey.header: must be an HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~), such as Idempotency-Key (got \"Idempotency Key\")"},
		"a negative body limit":        {func(c *Config) { c.MaxReplayBodyBytes = -1 }, "maxReplayBodyBytes: must be between 0 and 16777216 (got -1)"},
		"a negative max wait":          {func(c *Config) { c.RetryAfterMaxWait = -1 }, "retryAfter.maxWait: must be >= 0 (got -1ns)"},
		"a negative spread":            {func(c *Config) { c.RetryAfterSpread = -1 }, "retryAfter.spread: must be >= 0 (got -1ns)"},
		"a retry percent above 100":    {func(c *Config) { c.Budget = &limits.BudgetConfig{RetryPercent: 101} }, "budget.retryPercent: must be between 0 and 100 (got 101)"},
		"a negative retry floor":       {func(c *Config) { c.Budget = &limits.BudgetConfig{RetryPercent: 20, MinRetriesPerSecond: -1} }, "budget.minRetriesPerSecond: must be between 0 and 10000 (got -1)"},
		"a zero rate":                  {func(c *Config) { c.RateLimit = &limits.RateLimitConfig{Burst: 1} }, "rateLimit.requestsPerSecond: must be > 0 and <= 100000 (rateLimit.requestsPerMinute 1..6000000) (got 0)"},
		"a zero burst":                 {func(c *Config) { c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 1.5} }, "rateLimit.burst: must be between 1 and 10000 (got 0)"},
		"zero in flight":               {func(c *Config) { c.Concurrency = &limits.ConcurrencyConfig{} }, "concurrency.maxInFlight: must be between 1 and 10000 (got 0)"},
		"a negative queue":             {func(c *Config) { c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1, MaxQueued: -1} }, "concurrency.maxQueued: must be between 0 and 100000 (got -1)"},
		"a body limit above 16 MiB":    {func(c *Config) { c.MaxReplayBodyBytes = 16<<20 + 1 }, "maxReplayBodyBytes: must be between 0 and 16777216 (got 16777217)"},
		"a retry floor above 10000":    {func(c *Config) { c.Budget = &limits.BudgetConfig{RetryPercent: 20, MinRetriesPerSecond: 10001} }, "budget.minRetriesPerSecond: must be between 0 and 10000 (got 10001)"},
		"a rate above the largest quota": {func(c *Config) { c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 100000.5, Burst: 1} },
			"rateLimit.requestsPerSecond: must be > 0 and <= 100000 (rateLimit.requestsPerMinute 1..6000000) (got 100000.5)"},
		"a burst above 10000":   {func(c *Config) { c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 1, Burst: 10001} }, "rateLimit.burst: must be between 1 and 10000 (got 10001)"},
		"in flight above 10000": {func(c *Config) { c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 10001} }, "concurrency.maxInFlight: must be between 1 and 10000 (got 10001)"},
		"a queue above 100000":  {func(c *Config) { c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 100001} }, "concurrency.maxQueued: must be between 0 and 100000 (got 100001)"},
		"a status listed twice": {func(c *Config) { c.RetryOnStatus = []int{503, 429, 503} }, "retryOn.statusCodes[2]: duplicate of retryOn.statusCodes[0] (503)"},
		"a method listed twice": {func(c *Config) { c.ReplayableMethods = []string{"GET", "GET"} }, `replayableMethods[1]: duplicate of replayableMethods[0] ("GET")`},
		"a host listed twice":   {func(c *Config) { c.Hosts = []string{"a.example", "a.example"} }, `hosts[1]: duplicate of hosts[0] ("a.example")`},
		"33 hosts": {func(c *Config) {
			c.Hosts = nil
			for i := range 33 {
				c.Hosts = append(c.Hosts, fmt.Sprintf("h%d.example", i))
			}
		}, "hosts: must have at most 32 entries (got 33)"},
		"17 replayable methods": {func(c *Config) {
			c.ReplayableMethods = nil
			for i := range 17 {
				c.ReplayableMethods = append(c.ReplayableMethods, fmt.Sprintf("M%d", i))
			}
		}, "replayableMethods: must have at most 16 entries (got 17)"},
		"holdOnDeferral with one attempt": {func(c *Config) { c.MaxAttempts = 1; c.Pacing.HoldOnDeferral = true },
			"pacing.holdOnDeferral: needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred"},
		"holdOnDeferral with no retried status": {func(c *Config) { c.RetryOnStatus = nil; c.Pacing.HoldOnDeferral = true },
			"pacing.holdOnDeferral: needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred"},
		"an IPv6 literal with a zone": {func(c *Config) { c.Hosts = []string{"[fe80::1%eth0]:80"} },
			`hosts[0]: invalid IPv6 literal (zones are not allowed): must be "host", "host:port" or "*.suffix" in lower case ("[fe80::1%eth0]:80")`},
		"a port with a plus sign": {func(c *Config) { c.Hosts = []string{"a.example:+80"} },
			`hosts[0]: port must be a number between 1 and 65535: must be "host", "host:port" or "*.suffix" in lower case ("a.example:+80")`},
		"a negative queue timeout": {func(c *Config) { c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1, QueueTimeout: -1} }, "concurrency.queueTimeout: must be >= 0 (got -1ns)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := baseConfig()
			tc.mutate(&c)
			p, err := Compile(c)
			if err == nil || p != nil {
				t.Fatalf("Compile = %v, %v; want an error", p, err)
			}
			if err.Error() != tc.want {
				t.Fatalf("Compile error\n got: %s\nwant: %s", err, tc.want)
			}
		})
	}
}

func TestCompileReportsEveryProblem(t *testing.T) {
	c := baseConfig()
	c.MaxAttempts, c.Deadline = 0, 0
	_, err := Compile(c)
	want := "maxAttempts: must be between 1 and 10 (transmissions including the first) (got 0)\ndeadline: must be > 0 (got 0s)"
	if err == nil || err.Error() != want {
		t.Fatalf("Compile error = %v, want %q", err, want)
	}
}

func TestCompileCopiesAndCanonicalises(t *testing.T) {
	c := baseConfig()
	c.IdempotencyKeyHeader = "idempotency-key"
	p, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Hosts[0], c.RetryOnStatus[0] = "changed.example", 500
	got := p.Config()
	if got.Hosts[0] != "payments.shop.svc" || got.RetryOnStatus[0] != 429 {
		t.Fatalf("the policy shares the caller's slices: %v %v", got.Hosts, got.RetryOnStatus)
	}
	if p.IdempotencyKeyHeader() != "Idempotency-Key" {
		t.Fatalf("IdempotencyKeyHeader = %q, want the canonical Idempotency-Key", p.IdempotencyKeyHeader())
	}
	if !p.RetriesStatus(429) || p.RetriesStatus(500) || !p.MethodReplayable("GET") || p.MethodReplayable("POST") {
		t.Fatal("compiled lookups disagree with the config")
	}
}

func TestCompileAcceptsHostForms(t *testing.T) {
	for _, h := range []string{"payments.shop.svc", "api.partner.example:8443", "*.example.com", "10.0.0.1:80", "[::1]:8080", "localhost"} {
		c := baseConfig()
		c.Hosts = []string{h}
		if _, err := Compile(c); err != nil {
			t.Errorf("host %q: %v", h, err)
		}
	}
	if _, err := Compile(baseConfig()); err != nil || strings.Contains(baseConfig().Name, " ") {
		t.Fatalf("base config does not compile: %v", err)
	}
}

// TestPolicyAccessors: what an executor reads from a compiled policy, including
// the two values Compile derives (the effective connect timeout and the reserve).
func TestPolicyAccessors(t *testing.T) {
	type view struct {
		MaxAttempts           int
		Deadline              time.Duration
		PerTryTimeout         time.Duration
		ConnectTimeout        time.Duration
		Reserve               time.Duration
		Backoff               Backoff
		RetriesConnectFailure bool
		MaxReplayBodyBytes    int64
		Pacing                limits.PacingConfig
	}
	base := baseConfig()
	tests := map[string]struct {
		mutate func(*Config)
		want   view
	}{
		"no per-try or connect timeout: the default connect timeout and the minimum reserve": {nil, view{
			MaxAttempts: 4, Deadline: 30 * time.Second, ConnectTimeout: defaultConnectTimeout, Reserve: minReserve,
			Backoff: base.Backoff, RetriesConnectFailure: true, MaxReplayBodyBytes: 64 << 10,
		}},
		"a deadline shorter than the default connect timeout bounds the dial": {func(c *Config) {
			c.Deadline = 2 * time.Second
		}, view{
			MaxAttempts: 4, Deadline: 2 * time.Second, ConnectTimeout: 2 * time.Second, Reserve: minReserve,
			Backoff: base.Backoff, RetriesConnectFailure: true, MaxReplayBodyBytes: 64 << 10,
		}},
		"set timeouts are used as they are; the per-try timeout is the reserve": {func(c *Config) {
			c.MaxAttempts, c.PerTryTimeout, c.ConnectTimeout = 2, 3*time.Second, 700*time.Millisecond
			c.RetryOn &^= RetryConnectFailure
			c.MaxReplayBodyBytes = 0
			c.Pacing = limits.PacingConfig{HoldOnDeferral: true}
		}, view{
			MaxAttempts: 2, Deadline: 30 * time.Second, PerTryTimeout: 3 * time.Second, ConnectTimeout: 700 * time.Millisecond,
			Reserve: 3 * time.Second, Backoff: base.Backoff, Pacing: limits.PacingConfig{HoldOnDeferral: true},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, tc.mutate)
			got := view{p.MaxAttempts(), p.Deadline(), p.PerTryTimeout(), p.ConnectTimeout(), p.Reserve(),
				p.Backoff(), p.Retries(RetryConnectFailure), p.MaxReplayBodyBytes(), p.Pacing()}
			if got != tc.want {
				t.Fatalf("accessors = %+v\nwant        %+v", got, tc.want)
			}
		})
	}
}
