package httpdate

import (
	"testing"
	"time"
)

func TestSkew(t *testing.T) {
	received := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	tests := map[string]struct {
		date   string
		skew   time.Duration
		wantOK bool
	}{
		"a Date one minute behind is a skew of +60s": {"Sun, 06 Nov 1994 08:48:37 GMT", time.Minute, true},
		"a Date ahead is a negative skew":            {"Sun, 06 Nov 1994 08:49:47 GMT", -10 * time.Second, true},
		"surrounding spaces are ignored":             {"  Sun, 06 Nov 1994 08:49:37 GMT ", 0, true},
		"a malformed Date gives no skew":             {"yesterday", 0, false},
		"a Date with the wrong weekday gives none":   {"Mon, 06 Nov 1994 08:49:37 GMT", 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			skew, ok := Skew(tc.date, received)
			if skew != tc.skew || ok != tc.wantOK {
				t.Fatalf("Skew(%q) = %v, %v; want %v, %v", tc.date, skew, ok, tc.skew, tc.wantOK)
			}
		})
	}
}

// TestParseFiftyYearRule checks RFC 9110's rule for RFC 850's two-digit
// year on both sides of the boundary (now + 50 years), with now 2026-05-01 12:00:00.
func TestParseFiftyYearRule(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		value string
		want  time.Time
	}{
		"exactly 50 years ahead is not more than 50 years: 2076": {"Friday, 01-May-76 12:00:00 GMT", time.Date(2076, 5, 1, 12, 0, 0, 0, time.UTC)},
		"one second past 50 years ahead means the past: 1976":    {"Saturday, 01-May-76 12:00:01 GMT", time.Date(1976, 5, 1, 12, 0, 1, 0, time.UTC)},
		"a day past 50 years ahead means the past: 1976":         {"Sunday, 02-May-76 12:00:00 GMT", time.Date(1976, 5, 2, 12, 0, 0, 0, time.UTC)},
		"94 is 1994":                        {"Sunday, 06-Nov-94 08:49:37 GMT", time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)},
		"25 is last year":                   {"Thursday, 01-May-25 00:00:00 GMT", time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)},
		"70 is 2070, 44 years ahead":        {"Wednesday, 01-Jan-70 00:00:00 GMT", time.Date(2070, 1, 1, 0, 0, 0, 0, time.UTC)},
		"00 is 2000 and knows its leap day": {"Tuesday, 29-Feb-00 00:00:00 GMT", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, form, reason := Parse(tc.value, now)
			if reason != "" || form != RFC850 || !got.Equal(tc.want) {
				t.Fatalf("Parse(%q) = %v, %v, %q; want %v, rfc850, no reason", tc.value, got, form, reason, tc.want)
			}
		})
	}
	// The rule looks at now: late in a century, small years belong to the next one.
	late := time.Date(2095, 1, 1, 0, 0, 0, 0, time.UTC)
	got, _, reason := Parse(rfc850For(time.Date(2110, 1, 1, 0, 0, 0, 0, time.UTC)), late)
	if reason != "" || got.Year() != 2110 {
		t.Fatalf("two-digit year 10 seen in 2095 = %v, %v; want 2110", got, reason)
	}
}

// rfc850For formats t as an RFC 850 date (test helper; the weekday is computed).
func rfc850For(t time.Time) string { return t.UTC().Format("Monday, 02-Jan-06 15:04:05 GMT") }

// TestParseAgreesWithTheStandardLibrary cross-checks the hand-written
// calendar arithmetic against package time for IMF-fixdate and asctime over a
// wide range of instants (RFC 850 is left out: http.ParseTime's pivot differs).
func TestParseAgreesWithTheStandardLibrary(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for sec := int64(-5e9); sec < 2e10; sec += 7_777_777 {
		at := time.Unix(sec, 0).UTC()
		for _, layout := range []string{time.RFC1123, time.ANSIC} {
			s := at.Format(layout)
			if layout == time.RFC1123 {
				s = at.Format("Mon, 02 Jan 2006 15:04:05 GMT")
			}
			got, _, reason := Parse(s, now)
			if reason != "" || !got.Equal(at) {
				t.Fatalf("Parse(%q) = %v, %q; want %v", s, got, reason, at)
			}
		}
	}
}
