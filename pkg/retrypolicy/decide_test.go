package retrypolicy

import (
	"math"
	"testing"
	"time"
)

// baseConfig is a valid upstream: 4 attempts, 30s deadline, Equal backoff 1s..8s,
// 429/503, connect failures, GET/HEAD/OPTIONS, Idempotency-Key, maxWait 30s, no spread.
func baseConfig() Config {
	return Config{
		Name:                 "payments-api",
		Hosts:                []string{"payments.shop.svc"},
		MaxAttempts:          4,
		Deadline:             30 * time.Second,
		Backoff:              Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: JitterEqual},
		RetryOnStatus:        []int{429, 503},
		RetryOn:              RetryConnectFailure,
		ReplayableMethods:    []string{"GET", "HEAD", "OPTIONS"},
		IdempotencyKeyHeader: "Idempotency-Key",
		MaxReplayBodyBytes:   64 << 10,
		RetryAfterMaxWait:    30 * time.Second,
	}
}

func compile(t testing.TB, mutate func(*Config)) *Policy {
	t.Helper()
	c := baseConfig()
	if mutate != nil {
		mutate(&c)
	}
	p, err := Compile(c)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func hint(d time.Duration) Hint { return Hint{Delay: d, Form: FormSeconds} }

// TestDecideWorkedExamples are the worked examples of docs/retry-semantics.md#r3.
func TestDecideWorkedExamples(t *testing.T) {
	tests := map[string]struct {
		cfg  func(*Config)
		a    Attempt
		want Decision
	}{
		"server asks 30s, local backoff 8s, 12s left: defer to receipt+30s, no retry at 12s": {
			cfg:  func(c *Config) { c.MaxAttempts = 10; c.Backoff.Jitter = JitterNone },
			a:    Attempt{Number: 4, Status: 429, Replayable: true, Rewindable: true, Hint: hint(30 * time.Second), HasHint: true, Deadline: now.Add(12 * time.Second)},
			want: Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(30 * time.Second)},
		},
		"equal jitter, random 0, first retry waits 0.5s": {
			a:    Attempt{Number: 1, Status: 503, Replayable: true, Rewindable: true, Random: 0},
			want: Decision{Action: Retry, Delay: 500 * time.Millisecond},
		},
		"equal jitter, random 0, second retry waits 1s": {
			a:    Attempt{Number: 2, Status: 503, Replayable: true, Rewindable: true, Random: 0},
			want: Decision{Action: Retry, Delay: time.Second},
		},
		"equal jitter, random 0, third retry waits 2s": {
			a:    Attempt{Number: 3, Status: 503, Replayable: true, Rewindable: true, Random: 0},
			want: Decision{Action: Retry, Delay: 2 * time.Second},
		},
		"equal jitter, random 1, first retry waits 1s": {
			a:    Attempt{Number: 1, Status: 503, Replayable: true, Rewindable: true, Random: 1},
			want: Decision{Action: Retry, Delay: time.Second},
		},
		"equal jitter, random 1, second retry waits 2s": {
			a:    Attempt{Number: 2, Status: 503, Replayable: true, Rewindable: true, Random: 1},
			want: Decision{Action: Retry, Delay: 2 * time.Second},
		},
		"equal jitter, random 1, third retry waits 4s": {
			a:    Attempt{Number: 3, Status: 503, Replayable: true, Rewindable: true, Random: 1},
			want: Decision{Action: Retry, Delay: 4 * time.Second},
		},
		"a hint of 10s beats a backoff of 2s": {
			a:    Attempt{Number: 2, Status: 429, Replayable: true, Rewindable: true, Random: 1, Hint: hint(10 * time.Second), HasHint: true},
			want: Decision{Action: Retry, Delay: 10 * time.Second},
		},
		"a 60s hint over a 30s cap defers": {
			a:    Attempt{Number: 1, Status: 429, Replayable: true, Rewindable: true, Hint: hint(60 * time.Second), HasHint: true},
			want: Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(60 * time.Second)},
		},
		"retry index 3 of 3 stops": {
			a:    Attempt{Number: 4, Status: 503, Replayable: true, Rewindable: true, Random: 1},
			want: Decision{Action: Stop, Outcome: OutcomeExhausted},
		},
		"a non-replayable request stops": {
			a:    Attempt{Number: 1, Status: 503, Replayable: false, Rewindable: true, Random: 1},
			want: Decision{Action: Stop, Outcome: OutcomeNotReplayable},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, tc.cfg)
			if got := p.DecideAt(now, tc.a); got != tc.want {
				t.Fatalf("DecideAt = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// getAttempt is the first attempt of a replayable GET; withAttempt is a with f applied.
var getAttempt = Attempt{Number: 1, Replayable: true, Rewindable: true, Random: 1}

func withAttempt(a Attempt, f func(*Attempt)) Attempt { f(&a); return a }

// decideRulesCases are the cases of TestDecideRules.
var decideRulesCases = map[string]struct {
	cfg  func(*Config)
	a    Attempt
	want Decision
}{
	"a 200 is a success":                         {a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 200 }), want: Decision{Action: Stop, Outcome: OutcomeSuccess}},
	"a 304 is a success":                         {a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 304 }), want: Decision{Action: Stop, Outcome: OutcomeSuccess}},
	"a 404 is not retryable":                     {a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 404 }), want: Decision{Action: Stop, Outcome: OutcomeNotRetryable}},
	"a 500 not listed in retryOn is not retried": {a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 500 }), want: Decision{Action: Stop, Outcome: OutcomeNotRetryable}},
	"a 500 listed in retryOn is retried": {
		cfg: func(c *Config) { c.RetryOnStatus = []int{500} }, a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 500 }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"a malformed response is never retried, even of a replayable GET": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Malformed }), want: Decision{Action: Stop, Outcome: OutcomeUpstreamError},
	},
	"an upstream certificate that did not verify is never retried, even of a replayable GET": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Untrusted }), want: Decision{Action: Stop, Outcome: OutcomeUpstreamError},
	},
	"a canceled caller stops even if everything else would retry": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Canceled; a.Status = 503 }), want: Decision{Action: Stop, Outcome: OutcomeCanceled},
	},
	"a connect failure of a POST is retried: the request never left": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Err = ConnectFailure; a.Replayable = false }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"a connect failure whose body cannot be sent again is not replayed": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Err = ConnectFailure; a.Replayable = false; a.Rewindable = false }),
		want: Decision{Action: Stop, Outcome: OutcomeNotReplayable},
	},
	"a connect failure withAttempt retryOn.connectFailure off is an upstream error": {
		cfg: func(c *Config) { c.RetryOn &^= RetryConnectFailure }, a: withAttempt(getAttempt, func(a *Attempt) { a.Err = ConnectFailure }),
		want: Decision{Action: Stop, Outcome: OutcomeUpstreamError},
	},
	"a reset before the headers of a replayable request is retried withAttempt retryOn.resetBeforeHeaders": {
		cfg: func(c *Config) { c.RetryOn |= RetryResetBeforeHeaders }, a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous; a.Reset = true }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"a reset before the headers of a non-replayable request is not replayed, even withAttempt retryOn.resetBeforeHeaders": {
		cfg:  func(c *Config) { c.RetryOn |= RetryResetBeforeHeaders },
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous; a.Reset = true; a.Replayable = false }),
		want: Decision{Action: Stop, Outcome: OutcomeNotReplayable},
	},
	"a reset before the headers withAttempt retryOn.resetBeforeHeaders off is an upstream error": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous; a.Reset = true }), want: Decision{Action: Stop, Outcome: OutcomeUpstreamError},
	},
	"a timeout (ambiguous, not a reset) withAttempt retryOn.resetBeforeHeaders off is still retried": {
		cfg: func(c *Config) { c.RetryOn = 0 }, a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"an ambiguous failure of a replayable request is retried": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous }), want: Decision{Action: Retry, Delay: time.Second},
	},
	"an ambiguous failure of a non-replayable request is not retried": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Err = Ambiguous; a.Replayable = false }),
		want: Decision{Action: Stop, Outcome: OutcomeNotReplayable},
	},
	"a Retry-After does not make a non-replayable request replayable": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 429; a.Replayable = false; a.Hint = hint(time.Second); a.HasHint = true }),
		want: Decision{Action: Stop, Outcome: OutcomeNotReplayable},
	},
	"a request from another retrying layer is not retried here": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Nested = true }), want: Decision{Action: Stop, Outcome: OutcomeExhausted},
	},
	"maxAttempts 1 never retries": {
		cfg: func(c *Config) { c.MaxAttempts = 1 }, a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 503 }),
		want: Decision{Action: Stop, Outcome: OutcomeExhausted},
	},
	"the spread is added after the hint, scaled by the random number": {
		cfg:  func(c *Config) { c.RetryAfterSpread = time.Second },
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 429; a.Random = 0.5; a.Hint = hint(5 * time.Second); a.HasHint = true }),
		want: Decision{Action: Retry, Delay: 5500 * time.Millisecond},
	},
	"a hint of exactly maxWait is honoured": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 429; a.Hint = hint(30 * time.Second); a.HasHint = true }),
		want: Decision{Action: Retry, Delay: 30 * time.Second},
	},
	"a past-date hint of zero leaves the local backoff": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Hint = Hint{Form: FormIMFFixdate}; a.HasHint = true }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"a saturated hint defers": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Hint = hint(MaxDelay); a.HasHint = true }),
		want: Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(MaxDelay)},
	},
	"a local backoff past the deadline is deadline-exceeded withAttempt its time": {
		cfg: func(c *Config) { c.Backoff.Jitter = JitterNone; c.MaxAttempts = 10 },
		a: withAttempt(getAttempt, func(a *Attempt) {
			a.Number = 4
			a.Status = 503
			a.Hint = hint(5 * time.Second)
			a.HasHint = true
			a.Deadline = now.Add(7 * time.Second)
		}),
		want: Decision{Action: Defer, Outcome: OutcomeDeadlineExceeded, NotBefore: now.Add(8 * time.Second)},
	},
	"a wait that leaves exactly the reserve is made": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Deadline = now.Add(time.Second + minReserve) }),
		want: Decision{Action: Retry, Delay: time.Second},
	},
	"a wait that leaves less than the reserve is not made": {
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Deadline = now.Add(time.Second + minReserve - 1) }),
		want: Decision{Action: Defer, Outcome: OutcomeDeadlineExceeded, NotBefore: now.Add(time.Second)},
	},
	"the reserve is the per-try timeout when there is one": {
		cfg:  func(c *Config) { c.PerTryTimeout = 3 * time.Second },
		a:    withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Deadline = now.Add(3 * time.Second) }),
		want: Decision{Action: Defer, Outcome: OutcomeDeadlineExceeded, NotBefore: now.Add(time.Second)},
	},
	"a random number above 1 counts as 1": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Random = 7 }), want: Decision{Action: Retry, Delay: time.Second},
	},
	"a NaN random number counts as 0": {
		a: withAttempt(getAttempt, func(a *Attempt) { a.Status = 503; a.Random = math.NaN() }), want: Decision{Action: Retry, Delay: 500 * time.Millisecond},
	},
}

// TestDecideRules walks the truth table of DecideAt row by row.
func TestDecideRules(t *testing.T) {
	tests := decideRulesCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, tc.cfg)
			if got := p.DecideAt(now, tc.a); got != tc.want {
				t.Fatalf("DecideAt = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	b := func(j Jitter) Backoff { return Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: j} }
	s := time.Second
	tests := map[string]struct {
		b      Backoff
		random float64
		want   []time.Duration // indices 0, 1, 2, ...
	}{
		"full jitter windows are 1, 2, 4, 8s capped at 8s":   {b: b(JitterFull), random: 1, want: []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, 8 * s}},
		"full jitter at random 0 does not wait":              {b: b(JitterFull), random: 0, want: []time.Duration{0, 0, 0, 0}},
		"full jitter at random 0.25 is a quarter the window": {b: b(JitterFull), random: 0.25, want: []time.Duration{s / 4, s / 2, s, 2 * s, 2 * s}},
		"equal jitter at random 0 is half the window":        {b: b(JitterEqual), random: 0, want: []time.Duration{s / 2, s, 2 * s, 4 * s, 4 * s}},
		"equal jitter at random 1 is the window":             {b: b(JitterEqual), random: 1, want: []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s}},
		"no jitter is the window whatever the random":        {b: b(JitterNone), random: 0.3, want: []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s}},
		"an odd nanosecond window keeps equal jitter exact":  {b: Backoff{Base: 3, Max: 3, Jitter: JitterEqual}, random: 1, want: []time.Duration{3, 3}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for i, want := range tc.want {
				if got := tc.b.Delay(i, tc.random); got != want {
					t.Fatalf("Delay(%d, %v) = %v, want %v", i, tc.random, got, want)
				}
			}
		})
	}
}

func TestBackoffCeilingDoesNotOverflow(t *testing.T) {
	tests := map[string]struct {
		b     Backoff
		index int
		want  time.Duration
	}{
		"index 1000 is the max":                         {Backoff{Base: time.Second, Max: 8 * time.Second}, 1000, 8 * time.Second},
		"index 62 is the max":                           {Backoff{Base: 1, Max: MaxDelay}, 62, MaxDelay},
		"index 61 of 1ns is 2^61ns":                     {Backoff{Base: 1, Max: MaxDelay}, 61, 1 << 61},
		"an hour base at index 40 stays an hour":        {Backoff{Base: time.Hour, Max: time.Hour}, 40, time.Hour},
		"a negative index is the first retry":           {Backoff{Base: time.Second, Max: 8 * time.Second}, -3, time.Second},
		"a base that doubles past max stops at the max": {Backoff{Base: 3 * time.Second, Max: 10 * time.Second}, 2, 10 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.b.Ceiling(tc.index); got != tc.want {
				t.Fatalf("Ceiling(%d) = %v, want %v", tc.index, got, tc.want)
			}
		})
	}
}
