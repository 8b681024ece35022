package retrypolicy

import "time"

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
