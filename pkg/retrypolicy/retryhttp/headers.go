package retryhttp

// Header names the Transport reads and writes (docs/retry-semantics.md#r5).
const (
	HeaderAttempt   = "X-Retry-Attempt"    // on each outgoing attempt: 1, 2, …
	HeaderOutcome   = "X-Retry-Outcome"    // on the returned response
	HeaderAttempts  = "X-Retry-Attempts"   // on the returned response: transmissions made
	HeaderNotBefore = "X-Retry-Not-Before" // on deferred / deadline-exceeded responses, IMF-fixdate
	HeaderRequestID = "X-Request-Id"
	// HeaderTimeoutPhase is set on the responses generated for a timeout
	// (504, and the 503 of a shed request): which budget ran out (Phase).
	HeaderTimeoutPhase = "X-Retry-Timeout-Phase"
)
