package retrypolicy

import (
	"math"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
)

// HintForm says which form a valid Retry-After had; its String is the log and
// metric value of the parse result.
type HintForm uint8

// The forms RFC 9110 §10.2.3 allows (and §5.6.7 requires a recipient to accept).
const (
	FormNone       HintForm = iota // no hint
	FormSeconds                    // "120"
	FormIMFFixdate                 // "Sun, 06 Nov 1994 08:49:37 GMT"
	FormRFC850                     // "Sunday, 06-Nov-94 08:49:37 GMT"
	FormAsctime                    // "Sun Nov  6 08:49:37 1994"
)

func (f HintForm) String() string {
	switch f {
	case FormSeconds:
		return "seconds"
	case FormIMFFixdate:
		return "imf-fixdate"
	case FormRFC850:
		return "rfc850"
	case FormAsctime:
		return "asctime"
	}
	return "none"
}

// MaxDelay is what an absurdly large delay-seconds value or a date centuries ahead
// saturates to: a valid huge wait that exceeds every deadline and so defers. It is
// never turned into an error, which would fall back to a short local backoff (R1).
const MaxDelay = time.Duration(math.MaxInt64)

// Hint is a parsed Retry-After, anchored at the time the response was received.
type Hint struct {
	// Delay is the wait from receipt, >= 0. For a date it is
	// max(date − received, date − Date header, 0): the wait is a lower bound, and
	// using the server's own Date makes it immune to a client clock running fast.
	Delay time.Duration
	Form  HintForm
	// Skew is received − Date header (positive: the local clock is ahead of the
	// server's). Valid only if HasSkew (the response had a parseable Date).
	Skew    time.Duration
	HasSkew bool
}

// ParseError is a rejected header value: Retry-After (or an HTTP-date),
// grpc-timeout or grpc-retry-pushback-ms. Header is the header's name in lower
// case; Reason is a short stable token fit for a log field or metric label.
// The value itself is never included.
type ParseError struct{ Header, Reason string }

func (e *ParseError) Error() string { return e.Header + ": " + e.Reason }

// The parse failures. They are shared values, so a rejection does not allocate.
var (
	errEmpty        = &ParseError{Header: "retry-after", Reason: "empty"}
	errSignedNumber = &ParseError{Header: "retry-after", Reason: "signed-number"}  // "+5", "-1"
	errNotInteger   = &ParseError{Header: "retry-after", Reason: "not-an-integer"} // "1.5", "1e3", "1 2", "0x10"
	errDateFormat   = &ParseError{Header: "retry-after", Reason: httpdate.ReasonDateFormat}
	errNotGMT       = &ParseError{Header: "retry-after", Reason: httpdate.ReasonNotGMT}
	errWeekday      = &ParseError{Header: "retry-after", Reason: httpdate.ReasonWeekday}
	errDateRange    = &ParseError{Header: "retry-after", Reason: httpdate.ReasonDateRange}
	errUnrecognized = &ParseError{Header: "retry-after", Reason: httpdate.ReasonUnrecognized}
)

// ParseRetryAfter parses a Retry-After field value received at `received` (the
// wall time of the response's arrival), with the response's Date field value
// (or "") for the skew-immune interval. It implements R1:
//
//	value                              received 1994-11-06 08:49:00Z   result
//	"120", "  120 "                    -                               120s, seconds
//	"0"                                -                               0, seconds
//	"99999999999999999999999"          -                               MaxDelay (saturated, not an error)
//	"+5" "-1"                          -                               ParseError signed-number
//	"1.5" "1e3" "1 2" "0x1"            -                               ParseError not-an-integer
//	"" "   "                           -                               ParseError empty
//	"１２" (fullwidth), "soon"          -                               ParseError unrecognized
//	"Sun, 06 Nov 1994 08:49:37 GMT"    08:49:00                        37s, imf-fixdate
//	"Sunday, 06-Nov-94 08:49:37 GMT"   08:49:00                        37s, rfc850 (50-year rule)
//	"Sun Nov  6 08:49:37 1994"         08:49:00                        37s, asctime
//	"Sun, 06 Nov 1994 08:48:00 GMT"    08:49:00                        0 (past date: no wait)
//	"Sun, 06 Nov 1994 08:49:37 UTC"    -                               ParseError not-gmt
//	"Mon, 06 Nov 1994 08:49:37 GMT"    -                               ParseError weekday-mismatch
//	"Sun, 06 nov 1994 08:49:37 GMT"    -                               ParseError bad-date-format (names are case-sensitive)
//
// With Date "Sun, 06 Nov 1994 08:48:37 GMT" and a local clock one minute fast
// (received 08:49:37), the IMF example above gives max(0, 60s) = 60s and Skew = +60s.
// A *ParseError's Reason names the rejection (a log field and metric label).
// Surrounding spaces and tabs are ignored. It does not allocate.
func ParseRetryAfter(value string, received time.Time, date string) (Hint, error) {
	var h Hint
	if date != "" {
		h.Skew, h.HasSkew = httpdate.Skew(date, received)
	}
	v := httpdate.TrimOWS(value)
	if v == "" {
		return Hint{}, errEmpty
	}
	switch c := v[0]; {
	case c == '+' || c == '-':
		return Hint{}, errSignedNumber
	case '0' <= c && c <= '9':
		var n uint64
		sat := false
		for i := 0; i < len(v); i++ {
			d := v[i]
			if d < '0' || d > '9' {
				return Hint{}, errNotInteger
			}
			if n > (math.MaxInt64/uint64(time.Second)+1)/10 {
				sat = true // keep scanning: "999…9x" is still malformed
				continue
			}
			n = n*10 + uint64(d-'0')
		}
		h.Form = FormSeconds
		if sat || n > uint64(math.MaxInt64/int64(time.Second)) {
			h.Delay = MaxDelay
		} else {
			h.Delay = time.Duration(n) * time.Second
		}
		return h, nil
	}
	t, form, err := parseHTTPDate(v, received)
	if err != nil {
		return Hint{}, err
	}
	h.Form = form
	h.Delay = max(satSub(t, received), 0)
	if h.HasSkew {
		// date − Date = (date − received) + (received − Date)
		h.Delay = max(h.Delay, satAdd(satSub(t, received), h.Skew))
	}
	return h, nil
}

// parseHTTPDate parses an HTTP-date (RFC 9110 §5.6.7) strictly, resolving
// RFC 850's two-digit year by now (internal/httpdate), and returns the form as
// a HintForm and a rejection as the shared *ParseError of its reason.
func parseHTTPDate(s string, now time.Time) (time.Time, HintForm, error) {
	t, form, reason := httpdate.Parse(s, now)
	if reason != "" {
		return time.Time{}, FormNone, dateError(reason)
	}
	switch form {
	case httpdate.IMFFixdate:
		return t, FormIMFFixdate, nil
	case httpdate.RFC850:
		return t, FormRFC850, nil
	}
	return t, FormAsctime, nil
}

// dateError is the shared *ParseError of a reason of httpdate.Parse, so a
// rejection does not allocate.
func dateError(reason string) *ParseError {
	switch reason {
	case httpdate.ReasonNotGMT:
		return errNotGMT
	case httpdate.ReasonWeekday:
		return errWeekday
	case httpdate.ReasonDateRange:
		return errDateRange
	case httpdate.ReasonUnrecognized:
		return errUnrecognized
	}
	return errDateFormat
}

// satSub is a − b without wrapping: time.Time.Sub already saturates.
func satSub(a, b time.Time) time.Duration { return a.Sub(b) }

// satAdd adds durations, saturating at the int64 range.
func satAdd(a, b time.Duration) time.Duration {
	s := a + b
	if a > 0 && b > 0 && s < 0 {
		return MaxDelay
	}
	if a < 0 && b < 0 && s >= 0 {
		return time.Duration(math.MinInt64)
	}
	return s
}
