// Package retrypolicy decides whether, when and how an HTTP request is retried.
// It is the pure core: policies and decisions; package limits holds the
// per-upstream state that admission and pacing keep. Package retryhttp executes those decisions as an
// http.RoundTripper; the retry-sidecar uses it behind its proxy, and any Go
// program can use it in-process with the same results (docs/library.md).
//
// It exists because naive retries are unsafe: they resend before the server said
// so, resend what is not replayable, exceed the caller's deadline, multiply load
// during an outage, keep going after the caller gave up, and leak credentials into
// logs. Each of those is a rule of docs/retry-semantics.md (R1–R10) and each has a named test.
//
// The pieces, from pure to stateful:
//
//   - Config → Compile → *Policy: an immutable, validated upstream policy.
//   - Set: finds the Policy for a request authority (host:port > host > *.suffix).
//   - ParseRetryAfter: strict parsing of the server's hint, anchored at
//     receipt (R1). The Transport reads the rate-limit headers the same way
//     (docs/pacing.md).
//   - Backoff.Delay and Policy.DecideAt: a pure, allocation-free decision (R2–R5).
//   - Policy.Limits, a limits.State (its Budget, Gate, Pacer, Quota and
//     State.Admit): outage budget, admission and holds (R6, R7,
//     docs/pacing.md), kept per upstream in a Registry so that config
//     reloads do not reset them.
//
// The executor lives in package retryhttp (Transport, Observer, Error): R4–R10
// for HTTP. The package depends on the standard library and
// golang.org/x/time/rate only. Time comes from a clock.Clock (package clock;
// clocktest is a virtual one) and randomness is a parameter; every
// time-dependent method has an ...At twin, so every path is tested without
// sleeping.
package retrypolicy
