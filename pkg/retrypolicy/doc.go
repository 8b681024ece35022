// Package retrypolicy decides whether, when and how an HTTP request is retried,
// and executes that decision as an http.RoundTripper. The retry-sidecar uses it
// behind its proxy; any Go program can use it in-process with the same results.
//
// It exists because naive retries are unsafe: they resend before the server said
// so, resend what is not replayable, exceed the caller's deadline, multiply load
// during an outage, keep going after the caller gave up, and leak credentials into
// logs. Each of those is a rule of docs/retry-semantics.md (R1–R10) and each has a named test.
//
// The pieces, from pure to effectful:
//
//   - Config → Compile → *Policy: an immutable, validated upstream policy.
//   - Set: finds the Policy for a request authority (host:port > host > *.suffix).
//   - ParseRetryAfter: strict RFC 9110 Retry-After, anchored at receipt (R1).
//   - Backoff.Delay and Policy.DecideAt: a pure, allocation-free decision (R2–R5).
//   - Budget, Gate, Limits.Admit: outage budget and admission (R6, R7), kept per
//     upstream in a Registry so that config reloads do not reset them.
//   - Transport: the executor (R4–R10), reporting to an Observer.
//
// Clocks and randomness are injected (Transport.Clock, Transport.Sleep,
// Transport.Random; every time-dependent method has an ...At twin), so every
// path is tested without sleeping.
//
// In-process use:
//
//	p, err := retrypolicy.Compile(retrypolicy.Config{
//		Name: "payments-api", Hosts: []string{"payments.shop.svc"},
//		MaxAttempts: 4, Deadline: 30 * time.Second,
//		Backoff:       retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterFull},
//		RetryOnStatus: []int{429, 503}, RetryOnConnectFailure: true,
//		ReplayableMethods: []string{"GET", "HEAD", "OPTIONS"}, IdempotencyKeyHeader: "Idempotency-Key",
//		MaxReplayBodyBytes: 64 << 10, RetryAfterMaxWait: 30 * time.Second, RetryAfterSpread: time.Second,
//	})
//	if err != nil { return err } // e.g. "backoff.max: must be >= backoff.base (1s)"
//	client := &http.Client{Transport: &retrypolicy.Transport{Route: retrypolicy.Static(p)}}
//	resp, err := client.Get("http://payments.shop.svc/v1/charges/42")
//	// resp.Header: X-Retry-Outcome: success, X-Retry-Attempts: 2
//	// err, if any, is a *retrypolicy.Error carrying the Outcome (canceled, ...).
//
// In the sidecar, one Transport serves all upstreams: compile a Set on every
// config load, call Registry.Adopt(set) so each upstream keeps its budget, tokens
// and in-flight slots, publish the set in an atomic.Pointer, and route with
// func(r *http.Request) *Policy { return cur.Load().MatchRequest(r) }.
package retrypolicy
