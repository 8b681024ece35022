package retrypolicy

import (
	"math"
	"time"
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

// ParseError is a rejected Retry-After (or HTTP-date). Reason is a short stable
// token fit for a log field or metric label; the value itself is never included.
type ParseError struct{ Reason string }

func (e *ParseError) Error() string { return "retry-after: " + e.Reason }

// The parse failures. They are shared values, so a rejection does not allocate.
var (
	errEmpty        = &ParseError{Reason: "empty"}
	errSignedNumber = &ParseError{Reason: "signed-number"}  // "+5", "-1"
	errNotInteger   = &ParseError{Reason: "not-an-integer"} // "1.5", "1e3", "1 2", "0x10"
	errDateFormat   = &ParseError{Reason: "bad-date-format"}
	errNotGMT       = &ParseError{Reason: "not-gmt"}
	errWeekday      = &ParseError{Reason: "weekday-mismatch"}
	errDateRange    = &ParseError{Reason: "date-field-out-of-range"} // 31 Feb, 25:00:00
	errUnrecognized = &ParseError{Reason: "unrecognized"}            // "soon", "１２"
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
		if d, _, err := parseHTTPDate(date, received); err == nil {
			h.Skew = satSub(received, d)
			h.HasSkew = true
		}
	}
	v := trimOWS(value)
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

// parseHTTPDate parses the three HTTP-date formats of RFC 9110 §5.6.7, strictly:
// exact field widths, case-sensitive English names, GMT only, a weekday that
// matches the date. now resolves the two-digit year of RFC 850 by the 50-year
// rule: a date that appears more than 50 years in the future means the most
// recent past year with those two digits (now = 2026-05-01: "94" → 1994,
// "70" → 2070, "77" → 1977 once 2077-… is more than 50 years ahead). It does not
// rely on time.Parse or http.ParseTime (whose RFC 850 pivot differs) and does not
// allocate.
func parseHTTPDate(s string, now time.Time) (time.Time, HintForm, error) {
	s = trimOWS(s)
	switch {
	case len(s) < 4:
		return time.Time{}, FormNone, errUnrecognized
	case s[3] == ',':
		return parseIMF(s)
	case s[3] == ' ':
		return parseAsctime(s)
	}
	for i := 4; i < len(s) && i < 10; i++ {
		if s[i] == ',' {
			return parseRFC850(s, i, now)
		}
	}
	return time.Time{}, FormNone, errUnrecognized
}

// parseIMF: "Sun, 06 Nov 1994 08:49:37 GMT" (fixed 29 bytes).
func parseIMF(s string) (time.Time, HintForm, error) {
	if len(s) >= 26 && s[25] == ' ' && s[26:] != "GMT" {
		return time.Time{}, FormNone, errNotGMT
	}
	if len(s) != 29 || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[25] != ' ' {
		return time.Time{}, FormNone, errDateFormat
	}
	wd := weekdayShort(s[0:3])
	day, ok1 := num2(s[5:7])
	mon := month(s[8:11])
	year, ok2 := num4(s[12:16])
	if wd < 0 || !ok1 || mon == 0 || !ok2 {
		return time.Time{}, FormNone, errDateFormat
	}
	return build(year, mon, day, s[17:25], wd, FormIMFFixdate)
}

// parseRFC850: "Sunday, 06-Nov-94 08:49:37 GMT"; comma is the index of ','.
func parseRFC850(s string, comma int, now time.Time) (time.Time, HintForm, error) {
	r := s[comma:] // ", 06-Nov-94 08:49:37 GMT"
	if len(r) >= 21 && r[20] == ' ' && r[21:] != "GMT" {
		return time.Time{}, FormNone, errNotGMT
	}
	if len(r) != 24 || r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20] != ' ' {
		return time.Time{}, FormNone, errDateFormat
	}
	wd := weekdayLong(s[:comma])
	day, ok1 := num2(r[2:4])
	mon := month(r[5:8])
	yy, ok2 := num2(r[9:11])
	if wd < 0 || !ok1 || mon == 0 || !ok2 {
		return time.Time{}, FormNone, errDateFormat
	}
	hh, mm, ss, ok := clockFields(r[12:20])
	if !ok {
		return time.Time{}, FormNone, errDateFormat
	}
	if day < 1 || day > 31 {
		return time.Time{}, FormNone, errDateRange // the exact month length is checked once the year is known
	}
	// The 50-year rule (RFC 9110 §5.6.7), on calendar fields so it is exact.
	nu := now.UTC()
	ny, nmo, nd := nu.Date()
	nh, nmi, ns := nu.Clock()
	limit := unixOf(ny+50, int(nmo), nd, nh, nmi, ns)
	year := ny - ny%100 + yy
	if unixOf(year, mon, day, hh, mm, ss) > limit {
		year -= 100
	} else if unixOf(year+100, mon, day, hh, mm, ss) <= limit {
		year += 100
	}
	return build(year, mon, day, r[12:20], wd, FormRFC850)
}

// parseAsctime: "Sun Nov  6 08:49:37 1994" (24 bytes; day "SP DIGIT" or 2DIGIT).
func parseAsctime(s string) (time.Time, HintForm, error) {
	if len(s) != 24 || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
		return time.Time{}, FormNone, errDateFormat
	}
	wd := weekdayShort(s[0:3])
	mon := month(s[4:7])
	var day int
	ok1 := true
	if s[8] == ' ' {
		if s[9] < '0' || s[9] > '9' {
			ok1 = false
		}
		day = int(s[9] - '0')
	} else {
		day, ok1 = num2(s[8:10])
	}
	year, ok2 := num4(s[20:24])
	if wd < 0 || mon == 0 || !ok1 || !ok2 {
		return time.Time{}, FormNone, errDateFormat
	}
	return build(year, mon, day, s[11:19], wd, FormAsctime)
}

// build checks ranges and the weekday and returns the UTC time.
func build(year, mon, day int, hms string, wd int, form HintForm) (time.Time, HintForm, error) {
	hh, mm, ss, ok := clockFields(hms)
	if !ok {
		return time.Time{}, FormNone, errDateFormat
	}
	if day < 1 || day > daysIn(year, mon) || hh > 23 || mm > 59 || ss > 60 {
		return time.Time{}, FormNone, errDateRange
	}
	days := daysFromCivil(year, mon, day)
	if int((days%7+11)%7) != wd { // 1970-01-01 was a Thursday (4)
		return time.Time{}, FormNone, errWeekday
	}
	return time.Unix(days*86400+int64(hh*3600+mm*60+ss), 0).UTC(), form, nil
}

// clockFields parses "08:49:37".
func clockFields(s string) (h, m, sec int, ok bool) {
	if len(s) != 8 || s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, false
	}
	h, ok1 := num2(s[0:2])
	m, ok2 := num2(s[3:5])
	sec, ok3 := num2(s[6:8])
	return h, m, sec, ok1 && ok2 && ok3
}

func num2(s string) (int, bool) {
	if s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

func num4(s string) (int, bool) {
	a, ok1 := num2(s[0:2])
	b, ok2 := num2(s[2:4])
	return a*100 + b, ok1 && ok2
}

// month returns 1..12 for "Jan".."Dec" (case-sensitive), 0 otherwise.
func month(s string) int {
	switch s {
	case "Jan":
		return 1
	case "Feb":
		return 2
	case "Mar":
		return 3
	case "Apr":
		return 4
	case "May":
		return 5
	case "Jun":
		return 6
	case "Jul":
		return 7
	case "Aug":
		return 8
	case "Sep":
		return 9
	case "Oct":
		return 10
	case "Nov":
		return 11
	case "Dec":
		return 12
	}
	return 0
}

// weekdayShort returns 0 (Sun)..6 (Sat), or -1.
func weekdayShort(s string) int {
	switch s {
	case "Sun":
		return 0
	case "Mon":
		return 1
	case "Tue":
		return 2
	case "Wed":
		return 3
	case "Thu":
		return 4
	case "Fri":
		return 5
	case "Sat":
		return 6
	}
	return -1
}

func weekdayLong(s string) int {
	switch s {
	case "Sunday":
		return 0
	case "Monday":
		return 1
	case "Tuesday":
		return 2
	case "Wednesday":
		return 3
	case "Thursday":
		return 4
	case "Friday":
		return 5
	case "Saturday":
		return 6
	}
	return -1
}

func daysIn(year, mon int) int {
	switch mon {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d in the proleptic
// Gregorian calendar (the well-known era/day-of-era computation).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12 // March = 0
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

func unixOf(y, m, d, hh, mm, ss int) int64 {
	return daysFromCivil(y, m, d)*86400 + int64(hh*3600+mm*60+ss)
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
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
