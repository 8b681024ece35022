// Package ratelimitheader reads the rate-limit response headers (RateLimit
// with RateLimit-Policy, RateLimit-Remaining/-Reset, X-RateLimit-Remaining/
// -Reset) strictly and without allocating: the hint that quota-aware pacing
// holds an upstream on (pacing.rateLimitHeaders, docs/pacing.md). Package
// retryhttp is its one user.
package ratelimitheader

import (
	"math"
	"net/http"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
)

// maxDelay is what a reset too large to represent saturates to, the
// retrypolicy.MaxDelay of a Retry-After: a valid huge wait, never an error.
const maxDelay = time.Duration(math.MaxInt64)

// Form says which family of rate-limit response headers a hint came
// from; its String is the log value.
type Form uint8

// The header families read when pacing.rateLimitHeaders is on, in the order they
// are consulted (the first usable one wins; see Parse).
const (
	FormNone       Form = iota
	FormStructured      // RateLimit: "default";r=0;t=30 (+ RateLimit-Policy)
	FormSplit           // RateLimit-Remaining: 0, RateLimit-Reset: 30
	FormX               // X-RateLimit-Remaining: 0, X-RateLimit-Reset: 30 or 1767225600
)

func (f Form) String() string {
	switch f {
	case FormStructured:
		return "ratelimit"
	case FormSplit:
		return "ratelimit-remaining"
	case FormX:
		return "x-ratelimit-remaining"
	}
	return "none"
}

// epochResetThreshold: a reset value of RateLimit-Reset or X-RateLimit-Reset at
// or above it is a Unix time in seconds (2001-09-09 onwards), below it a number of
// seconds from receipt. No real window lasts 31 years, and no real epoch is older.
const epochResetThreshold = 1_000_000_000

// Hint is what a response said about the upstream's remaining quota.
// Only a hint with Remaining 0 and a reset in the future starts a hold (Hold).
type Hint struct {
	// Form is the header family the hint comes from, FormNone if the
	// response carried no usable rate-limit header.
	Form Form
	// Remaining is the smallest remaining quota announced, -1 if unknown.
	Remaining int64
	// Reset is the wait from receipt until the exhausted quota returns, if
	// HasReset; never negative (a past reset is 0).
	Reset    time.Duration
	HasReset bool
	// Malformed names the first rate-limit header field that was ignored because
	// its value is malformed, and Reason says why (a short stable token for a log
	// field or metric label). The value itself is never kept.
	Malformed, Reason string
}

// Hold reports whether the hint asks to send nothing for Reset: Remaining 0
// with a reset still in the future.
func (h Hint) Hold() (time.Duration, bool) {
	ok := h.Form != FormNone && h.Remaining == 0 && h.HasReset && h.Reset > 0
	return h.Reset, ok
}

// Canonical header keys (http.Header is keyed by textproto.CanonicalMIMEHeaderKey).
const (
	hdrRateLimit          = "Ratelimit"
	hdrRateLimitPolicy    = "Ratelimit-Policy"
	hdrRateLimitRemaining = "Ratelimit-Remaining"
	hdrRateLimitReset     = "Ratelimit-Reset"
	hdrXRateLimitRemain   = "X-Ratelimit-Remaining"
	hdrXRateLimitReset    = "X-Ratelimit-Reset"
)

// Parse failure reasons of the rate-limit headers.
const (
	reasonSyntax     = "structured-field-syntax" // not an RFC 9651 List of Items
	reasonUnsupport  = "unsupported-member"      // inner list, date or display string member
	reasonNoRemain   = "missing-r"               // a RateLimit item without r
	reasonBadParam   = "not-a-non-negative-integer"
	reasonNotInteger = "not-an-integer"
	reasonRepeated   = "repeated-field"
	reasonEmpty      = "empty"
)

// Parse reads the rate-limit response headers of h, received at
// `received` (wall time), strictly. It consults, in order, and uses the first
// family that is present and well-formed:
//
//	RateLimit: "default";r=0;t=30          RFC 9651 List; per item r = remaining, t = seconds to reset.
//	                                      An exhausted item without t takes w (the window) of the
//	                                      RateLimit-Policy item of the same name as its reset.
//	RateLimit-Remaining / RateLimit-Reset  digits only
//	X-RateLimit-Remaining / -Reset         digits only
//
// A reset of epochResetThreshold or more is a Unix time: the wait is
// max(reset − received, reset − Date), so a client clock that runs fast cannot
// shorten it (as for Retry-After, R1); below it the reset is delta seconds.
//
//	headers                                               received 2026-05-01 12:00:00Z   hint
//	RateLimit: "default";r=0;t=30                         -                               remaining 0, reset 30s: Hold 30s
//	RateLimit: "a";r=5;t=1, "b";r=0;t=60                  -                               remaining 0, reset 60s
//	RateLimit: "default";r=0 + RateLimit-Policy: "default";q=100;w=60                    reset 60s
//	X-RateLimit-Remaining: 0, X-RateLimit-Reset: 1777636830   12:00:00                    reset 30s (epoch)
//	X-RateLimit-Remaining: 0, X-RateLimit-Reset: 1777636770   12:00:00                    reset 0: no hold (past)
//	X-RateLimit-Remaining: -1                             -                               ignored, Malformed X-Ratelimit-Remaining
//	RateLimit: default;r=0;t=30.5                          -                               ignored, reason not-a-non-negative-integer
//
// A malformed field is ignored (as if absent) and reported in Malformed/Reason;
// the next family is still consulted. It does not allocate.
func Parse(h http.Header, received time.Time) Hint {
	hint := Hint{Remaining: -1}
	if v := h[hdrRateLimit]; len(v) > 0 && structured(&hint, v, h) {
		return hint
	}
	if rv, ok := h[hdrRateLimitRemaining]; ok {
		if split(&hint, FormSplit, hdrRateLimitRemaining, rv, hdrRateLimitReset, h[hdrRateLimitReset], received, h) {
			return hint
		}
	}
	if rv, ok := h[hdrXRateLimitRemain]; ok {
		split(&hint, FormX, hdrXRateLimitRemain, rv, hdrXRateLimitReset, h[hdrXRateLimitReset], received, h)
	}
	return hint
}

// structured reads the RateLimit field lines v (and RateLimit-Policy where
// relevant) into hint; false if RateLimit is malformed or lists no policy.
func structured(hint *Hint, v []string, h http.Header) bool {
	var acc rlAcc
	for _, line := range v {
		if reason := acc.parseList(line); reason != "" {
			hint.Malformed, hint.Reason = hdrRateLimit, reason
			return false
		}
	}
	if acc.members == 0 {
		return false
	}
	if acc.pending > 0 {
		for _, line := range h[hdrRateLimitPolicy] {
			if r := acc.parsePolicies(line); r != "" {
				hint.Malformed, hint.Reason = hdrRateLimitPolicy, r
				break
			}
		}
	}
	hint.Form, hint.Remaining = FormStructured, acc.remaining
	if acc.hasReset {
		hint.Reset, hint.HasReset = secondsSat(uint64(acc.reset)), true
	}
	return true
}

// split reads a Remaining/Reset pair of fields into hint; false if the
// remaining field is malformed (the next family is then consulted).
func split(hint *Hint, form Form, remName string, rem []string, resetName string, reset []string,
	received time.Time, h http.Header) bool {
	n, reason := digitsField(rem)
	if reason != "" {
		if hint.Malformed == "" {
			hint.Malformed, hint.Reason = remName, reason
		}
		return false
	}
	hint.Form, hint.Remaining = form, int64(min(n, math.MaxInt64))
	if reset == nil {
		return true
	}
	if n, reason = digitsField(reset); reason != "" {
		if hint.Malformed == "" {
			hint.Malformed, hint.Reason = resetName, reason
		}
		return true
	}
	hint.Reset, hint.HasReset = resetWait(n, received, h), true
	return true
}

// digitsField reads a field that must be one line of ASCII digits (OWS around
// allowed). Huge values saturate, as a huge Retry-After does.
func digitsField(v []string) (uint64, string) {
	if len(v) != 1 {
		return 0, reasonRepeated
	}
	s := httpdate.TrimOWS(v[0])
	if s == "" {
		return 0, reasonEmpty
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, reasonNotInteger
		}
		if n > math.MaxUint64/10-1 {
			n = math.MaxUint64 // keep scanning: "999…9x" is still malformed
			continue
		}
		n = n*10 + uint64(c-'0')
	}
	return n, ""
}

// maxResetSeconds is where a reset saturates to maxDelay.
const maxResetSeconds = uint64(math.MaxInt64 / int64(time.Second))

// secondsSat is n seconds, saturated at maxDelay.
func secondsSat(n uint64) time.Duration {
	if n > maxResetSeconds {
		return maxDelay
	}
	return time.Duration(n) * time.Second
}

// resetWait converts a reset value to a wait from receipt (see Parse).
func resetWait(n uint64, received time.Time, h http.Header) time.Duration {
	if n < epochResetThreshold {
		return time.Duration(n) * time.Second
	}
	if n > maxResetSeconds {
		return maxDelay
	}
	at := time.Unix(int64(n), 0)
	wait := max(at.Sub(received), 0)
	if date := h["Date"]; len(date) > 0 {
		if d, _, reason := httpdate.Parse(date[0], received); reason == "" {
			wait = max(wait, at.Sub(d))
		}
	}
	return wait
}

// maxPendingNames bounds the exhausted RateLimit items without t whose reset is
// looked up in RateLimit-Policy; more are ignored (no allocation).
const maxPendingNames = 4

// rlAcc accumulates the items of a RateLimit field (and RateLimit-Policy).
type rlAcc struct {
	members   int
	remaining int64 // smallest r, -1 none yet
	reset     int64 // largest t of an item with r = 0
	hasReset  bool
	pending   int
	names     [maxPendingNames]sfSpan // exhausted items without t
}

// sfSpan is a bare item inside the field text it was scanned from.
type sfSpan struct {
	kind sfKind
	text string // the item as written: quotes and escapes of a string included
}

// Parameter states of rlItem besides a valid non-negative Integer value.
const (
	paramAbsent  = -1
	paramInvalid = -2 // present, but not a non-negative Integer
)

// rlItem is one scanned List member: its name and its r, t and w parameters,
// each a value >= 0 or paramAbsent / paramInvalid (RFC 9651: the last
// occurrence of a key wins).
type rlItem struct {
	name    sfSpan
	r, t, w int64
}

func paramValue(v sfItem) int64 {
	if v.kind == sfInteger && v.n >= 0 {
		return v.n
	}
	return paramInvalid
}

// rateLimitItem scans one List member (an Item; inner lists are refused) into
// it. It returns "" or the reason the field is malformed.
func (sc *sfScanner) rateLimitItem(it *rlItem) string {
	it.r, it.t, it.w = paramAbsent, paramAbsent, paramAbsent
	start := sc.i
	v, ok := sc.bareValue()
	if !ok {
		return sc.fail
	}
	it.name = sfSpan{kind: v.kind, text: sc.s[start:sc.i]}
	for sc.i < len(sc.s) && sc.s[sc.i] == ';' {
		sc.i++
		sc.skipSP()
		key, ok := sc.key()
		if !ok {
			return reasonSyntax
		}
		val := sfItem{kind: sfBoolean, n: 1}
		if sc.i < len(sc.s) && sc.s[sc.i] == '=' {
			sc.i++
			if val, ok = sc.bareValue(); !ok {
				return sc.fail
			}
		}
		if len(key) == 1 {
			switch key[0] {
			case 'r':
				it.r = paramValue(val)
			case 't':
				it.t = paramValue(val)
			case 'w':
				it.w = paramValue(val)
			}
		}
	}
	return ""
}

// parseList scans one RateLimit field line, an RFC 9651 List of Items whose
// parameters r (required) and t (optional) are non-negative Integers. It
// returns "" or the reason the field is malformed.
func (a *rlAcc) parseList(line string) string {
	if a.members == 0 {
		a.remaining = -1
	}
	sc := sfScanner{s: line}
	sc.skipSP()
	sem := ""
	var it rlItem
	for !sc.eof() {
		if reason := sc.rateLimitItem(&it); reason != "" {
			return reason
		}
		switch {
		case sem != "":
		case it.r == paramAbsent:
			sem = reasonNoRemain
		case it.r == paramInvalid || it.t == paramInvalid:
			sem = reasonBadParam
		}
		if sem != "" { // keep scanning: a syntax error is the better report
			if !sc.listNext() {
				return reasonSyntax
			}
			continue
		}
		a.members++
		if a.remaining < 0 || it.r < a.remaining {
			a.remaining = it.r
		}
		if it.r == 0 {
			switch {
			case it.t >= 0:
				if !a.hasReset || it.t > a.reset {
					a.reset, a.hasReset = it.t, true
				}
			case a.pending < len(a.names):
				a.names[a.pending] = it.name
				a.pending++
			}
		}
		if !sc.listNext() {
			return reasonSyntax
		}
	}
	return sem
}

// parsePolicies scans one RateLimit-Policy line (a List of Items with a window
// parameter w in seconds) and takes the w of each policy named by an exhausted
// RateLimit item that had no t as that item's reset.
func (a *rlAcc) parsePolicies(line string) string {
	sc := sfScanner{s: line}
	sc.skipSP()
	sem := ""
	var reset int64
	found := false
	var it rlItem
	for !sc.eof() {
		if reason := sc.rateLimitItem(&it); reason != "" {
			return reason
		}
		if sem == "" && (it.w == paramInvalid || it.w == 0) {
			sem = reasonBadParam
		}
		if it.w > 0 && sem == "" {
			for _, n := range a.names[:a.pending] {
				if sfSameName(n, it.name) && (!found || it.w > reset) {
					reset, found = it.w, true
				}
			}
		}
		if !sc.listNext() {
			return reasonSyntax
		}
	}
	if sem == "" && found && (!a.hasReset || reset > a.reset) {
		a.reset, a.hasReset = reset, true
	}
	return sem
}
