// Package httpdate parses the HTTP-date of RFC 9110 §5.6.7 strictly and
// without allocating. Package retrypolicy reads the date forms of Retry-After
// and the Date field through it (R1, docs/retry-semantics.md), and
// internal/ratelimitheader the Date an epoch reset is measured against, so
// both accept exactly the same dates. It also writes the one date a retrying
// layer announces, its Not-Before (Ceil, Format).
package httpdate

import "time"

// Form is the HTTP-date format a value had.
type Form uint8

// The three formats of RFC 9110 §5.6.7.
const (
	None       Form = iota
	IMFFixdate      // "Sun, 06 Nov 1994 08:49:37 GMT"
	RFC850          // "Sunday, 06-Nov-94 08:49:37 GMT"
	Asctime         // "Sun Nov  6 08:49:37 1994"
)

// The reasons a value is rejected: short stable tokens for a log field or a
// metric label (retrypolicy.ParseError's Reason). The value itself is never
// reported.
const (
	ReasonDateFormat   = "bad-date-format"
	ReasonNotGMT       = "not-gmt"
	ReasonWeekday      = "weekday-mismatch"
	ReasonDateRange    = "date-field-out-of-range" // 31 Feb, 25:00:00
	ReasonUnrecognized = "unrecognized"            // "soon", "１２"
)

// Skew is the clock skew a response's Date field shows: the local receipt time
// minus Date (positive: the local clock is ahead). ok is false when date is not
// a valid HTTP-date. It does not allocate.
func Skew(date string, received time.Time) (skew time.Duration, ok bool) {
	d, _, reason := Parse(date, received)
	if reason != "" {
		return 0, false
	}
	return received.Sub(d), true
}

// Parse parses the three HTTP-date formats of RFC 9110 §5.6.7, strictly:
// exact field widths, case-sensitive English names, GMT only, a weekday that
// matches the date. now resolves the two-digit year of RFC 850 by the 50-year
// rule: a date that appears more than 50 years in the future means the most
// recent past year with those two digits (now = 2026-05-01: "94" → 1994,
// "70" → 2070, "77" → 1977 once 2077-… is more than 50 years ahead). It does not
// rely on time.Parse or http.ParseTime (whose RFC 850 pivot differs) and does not
// allocate.
func Parse(s string, now time.Time) (t time.Time, form Form, reason string) {
	s = TrimOWS(s)
	switch {
	case len(s) < 4:
		return time.Time{}, None, ReasonUnrecognized
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
	return time.Time{}, None, ReasonUnrecognized
}

// parseIMF: "Sun, 06 Nov 1994 08:49:37 GMT" (fixed 29 bytes).
func parseIMF(s string) (time.Time, Form, string) {
	if len(s) >= 26 && s[25] == ' ' && s[26:] != "GMT" {
		return time.Time{}, None, ReasonNotGMT
	}
	if len(s) != 29 || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[25] != ' ' {
		return time.Time{}, None, ReasonDateFormat
	}
	wd := weekdayShort(s[0:3])
	day, ok1 := num2(s[5:7])
	mon := month(s[8:11])
	year, ok2 := num4(s[12:16])
	if wd < 0 || !ok1 || mon == 0 || !ok2 {
		return time.Time{}, None, ReasonDateFormat
	}
	return build(year, mon, day, s[17:25], wd, IMFFixdate)
}

// parseRFC850: "Sunday, 06-Nov-94 08:49:37 GMT"; comma is the index of ','.
func parseRFC850(s string, comma int, now time.Time) (time.Time, Form, string) {
	r := s[comma:] // ", 06-Nov-94 08:49:37 GMT"
	if len(r) >= 21 && r[20] == ' ' && r[21:] != "GMT" {
		return time.Time{}, None, ReasonNotGMT
	}
	if len(r) != 24 || r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r[20] != ' ' {
		return time.Time{}, None, ReasonDateFormat
	}
	wd := weekdayLong(s[:comma])
	day, ok1 := num2(r[2:4])
	mon := month(r[5:8])
	yy, ok2 := num2(r[9:11])
	if wd < 0 || !ok1 || mon == 0 || !ok2 {
		return time.Time{}, None, ReasonDateFormat
	}
	hh, mm, ss, ok := clockFields(r[12:20])
	if !ok {
		return time.Time{}, None, ReasonDateFormat
	}
	if day < 1 || day > 31 {
		return time.Time{}, None, ReasonDateRange // the exact month length is checked once the year is known
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
	return build(year, mon, day, r[12:20], wd, RFC850)
}

// parseAsctime: "Sun Nov  6 08:49:37 1994" (24 bytes; day "SP DIGIT" or 2DIGIT).
func parseAsctime(s string) (time.Time, Form, string) {
	if len(s) != 24 || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' {
		return time.Time{}, None, ReasonDateFormat
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
		return time.Time{}, None, ReasonDateFormat
	}
	return build(year, mon, day, s[11:19], wd, Asctime)
}

// build checks ranges and the weekday and returns the UTC time.
func build(year, mon, day int, hms string, wd int, form Form) (time.Time, Form, string) {
	hh, mm, ss, ok := clockFields(hms)
	if !ok {
		return time.Time{}, None, ReasonDateFormat
	}
	if day < 1 || day > daysIn(year, mon) || hh > 23 || mm > 59 || ss > 60 {
		return time.Time{}, None, ReasonDateRange
	}
	days := daysFromCivil(year, mon, day)
	if int((days%7+11)%7) != wd { // 1970-01-01 was a Thursday (4)
		return time.Time{}, None, ReasonWeekday
	}
	return time.Unix(days*86400+int64(hh*3600+mm*60+ss), 0).UTC(), form, ""
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

// TrimOWS removes the optional whitespace (spaces and tabs, RFC 9110 §5.6.3)
// around a field value.
func TrimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
