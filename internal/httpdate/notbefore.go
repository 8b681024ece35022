package httpdate

// The Not-Before time a retrying layer announces (X-Retry-Not-Before,
// retryhttp.Error.NotBefore, the span attribute retry.not_before) is an
// HTTP-date: rounded up to the whole second and written as an IMF-fixdate
// (docs/retry-semantics.md#not-before).

import (
	"net/http"
	"time"
)

// Ceil rounds t up to the next whole second (t itself when it is one).
// X-Retry-Not-Before and the Not-Before of an *Error are never earlier than the
// time the server allowed: receipt at 12:00:00.7 plus Retry-After: 60 is
// 12:01:00.7, announced as 12:01:01, never 12:01:00.
func Ceil(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// Format formats a Not-Before time as the IMF-fixdate that
// X-Retry-Not-Before carries. Round it up with Ceil first.
func Format(t time.Time) string { return t.UTC().Format(http.TimeFormat) }
