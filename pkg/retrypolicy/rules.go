package retrypolicy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The rules an upstream's fields obey, defined once: Compile applies them to a
// Config, and the API's validation (api/v1alpha1) applies them to a RetryPolicy,
// so the API server accepts exactly what every sidecar compiles. Each checker
// returns "" when the value is allowed, else what is allowed (without the
// field path, which the caller knows).

// Bounds of an upstream's fields.
const (
	MinAttempts          = 1
	MaxAttempts          = 10
	MaxMethodTokenLength = 32
	MaxHeaderNameLength  = 128
)

// retryableStatuses are the statuses retryOn may list; anything else is refused
// because retrying it is either pointless (4xx) or unsafe to assume.
var retryableStatuses = [...]int{408, 425, 429, 500, 502, 503, 504}

// RetryableStatuses returns the statuses retryOn.statusCodes may list, in
// ascending order.
func RetryableStatuses() []int { return append([]int(nil), retryableStatuses[:]...) }

// statusBit maps a retryable status to its bit in Policy.statusMask; 0 if none.
func statusBit(code int) uint8 {
	for i, s := range retryableStatuses {
		if s == code {
			return 1 << i
		}
	}
	return 0
}

// StatusProblem checks one retryOn.statusCodes entry.
func StatusProblem(code int) string {
	if statusBit(code) != 0 {
		return ""
	}
	allowed := make([]string, len(retryableStatuses))
	for i, s := range retryableStatuses {
		allowed[i] = strconv.Itoa(s)
	}
	return "must be one of " + strings.Join(allowed, ", ")
}

// AttemptsProblem checks maxAttempts.
func AttemptsProblem(n int) string {
	if n < MinAttempts || n > MaxAttempts {
		return fmt.Sprintf("must be between %d and %d (transmissions including the first)", MinAttempts, MaxAttempts)
	}
	return ""
}

// MethodProblem checks one replayableMethods entry. forbidden reports that m is
// a well-formed method that may never be replayed by method (POST, PATCH).
func MethodProblem(m string) (problem string, forbidden bool) {
	switch {
	case len(m) > MaxMethodTokenLength || !IsToken(m):
		return "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE", false
	case m != strings.ToUpper(m):
		return fmt.Sprintf("must be upper-case (%s); methods are case-sensitive", strings.ToUpper(m)), false
	case m == "POST" || m == "PATCH":
		return "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true
	}
	return "", false
}

// HeaderNameProblem checks idempotencyKey.header (non-empty).
func HeaderNameProblem(h string) string {
	if len(h) > MaxHeaderNameLength || !IsToken(h) {
		return "must be an HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~), such as Idempotency-Key"
	}
	return ""
}

// PerTryTimeoutProblem checks perTryTimeout against deadline (both > 0).
func PerTryTimeoutProblem(perTry, deadline time.Duration) string {
	if perTry >= deadline {
		return fmt.Sprintf("must be < deadline (%s)", deadline)
	}
	return ""
}

// ConnectTimeoutProblem checks connectTimeout against deadline (both > 0).
func ConnectTimeoutProblem(connect, deadline time.Duration) string {
	if connect > deadline {
		return fmt.Sprintf("must be <= deadline (%s)", deadline)
	}
	return ""
}

// BackoffMaxProblem checks backoff.max against backoff.base (both > 0).
func BackoffMaxProblem(base, maxDelay time.Duration) string {
	if maxDelay < base {
		return fmt.Sprintf("must be >= backoff.base (%s)", base)
	}
	return ""
}

// IsToken reports whether s is an RFC 9110 token (method names, header names).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
