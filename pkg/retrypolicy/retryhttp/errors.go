package retryhttp

import (
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Error is what the Transport returns when a logical request ends without a
// response to give back: canceled, deadline-exceeded, or a transport failure that
// was not (or no longer) retried. Attempts is the number of transmissions made.
// Err is the last underlying error; its text may contain the request URL (Go's
// *url.Error does), so observers never log it (R10).
type Error struct {
	Outcome  retrypolicy.Outcome
	Attempts int
	Err      error
	// NotBefore is the earliest time a new request may be sent, for outcomes
	// deferred and deadline-exceeded (zero otherwise); already rounded up to the
	// whole second, as X-Retry-Not-Before carries it.
	NotBefore time.Time
	// Phase says which budget ran out when a timeout ended the request
	// (connect, tls, headers; queue for admission), "" otherwise.
	Phase Phase
}

func (e *Error) Error() string {
	if e.Err == nil {
		return "retrypolicy: " + string(e.Outcome)
	}
	return "retrypolicy: " + string(e.Outcome) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
