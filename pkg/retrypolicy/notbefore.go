package retrypolicy

import (
	"net/http"
	"time"
)

// CeilSecond rounds t up to the next whole second (t itself when it is one).
// X-Retry-Not-Before and the Not-Before of an *Error are never earlier than the
// time the server allowed: receipt at 12:00:00.7 plus Retry-After: 60 is
// 12:01:00.7, announced as 12:01:01, never 12:01:00
// (docs/retry-semantics.md#not-before).
func CeilSecond(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// FormatNotBefore formats a Not-Before time as the IMF-fixdate that
// X-Retry-Not-Before carries. Round it up with CeilSecond first.
func FormatNotBefore(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// DateSkew is the clock skew a response's Date header shows: the local receipt
// time minus Date (positive: the local clock is ahead). ok is false when date is
// not a valid HTTP-date. It does not allocate.
func DateSkew(date string, received time.Time) (skew time.Duration, ok bool) {
	d, _, err := parseHTTPDate(trimOWS(date), received)
	if err != nil {
		return 0, false
	}
	return satSub(received, d), true
}
