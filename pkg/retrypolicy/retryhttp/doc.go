// Package retryhttp executes the decisions of package retrypolicy for HTTP:
// Transport is an http.RoundTripper that applies a *retrypolicy.Policy to each
// request (R4–R10 of docs/retry-semantics.md): it buffers replayable bodies,
// marks attempts with X-Retry-Attempt, bounds each attempt and the logical
// request, asks the policy's Limits for admission, waits as the policy decides,
// drains and closes what it retries, and reports to an Observer. The
// retry-sidecar uses it behind its proxy; any Go program can use it
// in-process with the same results (docs/library.md).
//
//	p, err := retrypolicy.Compile(retrypolicy.Config{
//		Name: "payments-api", Hosts: []string{"payments.shop.svc"},
//		MaxAttempts: 4, Deadline: 30 * time.Second,
//		Backoff:       retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterFull},
//		RetryOnStatus: []int{429, 503}, RetryOn: retrypolicy.RetryConnectFailure,
//		ReplayableMethods: []string{"GET", "HEAD", "OPTIONS"}, IdempotencyKeyHeader: "Idempotency-Key",
//		MaxReplayBodyBytes: 64 << 10, RetryAfterMaxWait: 30 * time.Second, RetryAfterSpread: time.Second,
//	})
//	if err != nil { return err } // e.g. "backoff.max: must be >= backoff.base (1s)"
//	client := &http.Client{Transport: &retryhttp.Transport{Route: retryhttp.Static(p)}}
//	resp, err := client.Get("http://payments.shop.svc/v1/charges/42")
//	// resp.Header: X-Retry-Outcome: success, X-Retry-Attempts: 2
//	// err, if any, is a *retryhttp.Error carrying the Outcome (canceled, ...).
//
// In the sidecar, one Transport serves all upstreams: compile a Set on every
// config load, call Registry.Adopt(set) so each upstream keeps its budget, tokens
// and in-flight slots, publish the set in an atomic.Pointer, and route with
// func(r *http.Request) *retrypolicy.Policy { return cur.Load().MatchRequest(r) }.
//
// Clocks and randomness are injected (Transport.Clock, Transport.Sleep,
// Transport.Random), so every path is tested without sleeping.
package retryhttp
