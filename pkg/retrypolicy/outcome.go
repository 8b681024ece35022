package retrypolicy

// Outcome names how one logical request ended. The value is what retryhttp.Transport
// writes into the X-Retry-Outcome response header and what its Observer reports,
// so it is a stable, lower-case wire name (docs/retry-semantics.md#outcomes), never a message.
type Outcome string

// The outcomes of docs/retry-semantics.md#outcomes. Exactly one is given to every logical request that a
// policy applied to.
const (
	// OutcomeSuccess: the last attempt got a response whose status is below 400
	// and not in retryOn.statusCodes.
	OutcomeSuccess Outcome = "success"
	// OutcomeNotRetryable: a response (>= 400) or an error that the policy does not
	// retry, e.g. a 404, or a 500 when retryOn lists only 429 and 503.
	OutcomeNotRetryable Outcome = "not-retryable"
	// OutcomeNotReplayable: the result was retryable but the request is not
	// (method not replayable and no idempotency key, or a body that cannot be
	// re-read). A 429/503/Retry-After never makes such a request replayable.
	OutcomeNotReplayable Outcome = "not-replayable"
	// OutcomeExhausted: maxAttempts transmissions were made, or the request already
	// carried X-Retry-Attempt from an outer retrying layer.
	OutcomeExhausted Outcome = "exhausted"
	// OutcomeDeferred: the server asked for a wait that is longer than
	// retryAfter.maxWait or that would end past the deadline. The caller gets the
	// upstream's response and X-Retry-Not-Before; the wait is never shortened.
	OutcomeDeferred Outcome = "deferred"
	// OutcomeDeadlineExceeded: the local backoff (not a server hint) or an attempt
	// would not fit into the deadline, or the deadline passed during an attempt.
	OutcomeDeadlineExceeded Outcome = "deadline-exceeded"
	// OutcomeBudgetExhausted: the upstream's outage budget (R6) allows no more
	// retries right now; the last upstream response goes back to the caller.
	OutcomeBudgetExhausted Outcome = "budget-exhausted"
	// OutcomeShed: admission (R7) refused an attempt: rate limit or concurrency
	// queue full, or the wait for capacity would pass the deadline.
	OutcomeShed Outcome = "shed"
	// OutcomeCanceled: the caller's context ended. Never retried, never an
	// ordinary error.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeUpstreamError: the last attempt failed without a response and the
	// failure is not retried (e.g. connect failure with retryOn.connectFailure off).
	OutcomeUpstreamError Outcome = "upstream-error"
)

// Outcomes lists every outcome, in the order of docs/retry-semantics.md#outcomes; handy for pre-creating metric series.
func Outcomes() []Outcome {
	return []Outcome{
		OutcomeSuccess, OutcomeNotRetryable, OutcomeNotReplayable, OutcomeExhausted,
		OutcomeDeferred, OutcomeDeadlineExceeded, OutcomeBudgetExhausted, OutcomeShed,
		OutcomeCanceled, OutcomeUpstreamError,
	}
}
