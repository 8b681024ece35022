package retrypolicy

import (
	"errors"
	"testing"
	"time"
)

// received is the wall time the response arrived in the parser tables.
var received = time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC) // a Sunday

func TestParseRetryAfter(t *testing.T) {
	tests := map[string]struct {
		value     string
		received  time.Time
		date      string
		wantDelay time.Duration
		wantForm  HintForm
		wantSkew  time.Duration
		wantHas   bool
		wantErr   error
	}{
		// delay-seconds
		"plain seconds are a wait from receipt":                 {value: "120", wantDelay: 120 * time.Second, wantForm: FormSeconds},
		"surrounding spaces are allowed":                        {value: "  120 ", wantDelay: 120 * time.Second, wantForm: FormSeconds},
		"surrounding tabs are allowed":                          {value: "\t7\t", wantDelay: 7 * time.Second, wantForm: FormSeconds},
		"zero means retry at once":                              {value: "0", wantDelay: 0, wantForm: FormSeconds},
		"leading zeros are digits like any other":               {value: "007", wantDelay: 7 * time.Second, wantForm: FormSeconds},
		"the largest exact value is kept":                       {value: "9223372036", wantDelay: 9223372036 * time.Second, wantForm: FormSeconds},
		"one more second than fits saturates":                   {value: "9223372037", wantDelay: MaxDelay, wantForm: FormSeconds},
		"a huge number is a valid huge wait, not an error":      {value: "99999999999999999999999", wantDelay: MaxDelay, wantForm: FormSeconds},
		"a plus sign is rejected":                               {value: "+5", wantErr: errSignedNumber},
		"a minus sign is rejected":                              {value: "-1", wantErr: errSignedNumber},
		"a decimal point is rejected":                           {value: "1.5", wantErr: errNotInteger},
		"an exponent is rejected":                               {value: "1e3", wantErr: errNotInteger},
		"an inner space is rejected":                            {value: "1 2", wantErr: errNotInteger},
		"hex is rejected":                                       {value: "0x10", wantErr: errNotInteger},
		"a unit suffix is rejected":                             {value: "12s", wantErr: errNotInteger},
		"a huge number with junk at the end is still malformed": {value: "99999999999999999999999x", wantErr: errNotInteger},
		"the empty string is rejected, not read as zero":        {value: "", wantErr: errEmpty},
		"only spaces are rejected":                              {value: "   ", wantErr: errEmpty},
		"fullwidth digits are rejected":                         {value: "１２", wantErr: errUnrecognized},
		"arabic-indic digits are rejected":                      {value: "٣", wantErr: errUnrecognized},
		"a word is rejected":                                    {value: "soon", wantErr: errUnrecognized},

		// IMF-fixdate
		"an IMF-fixdate in the future is the interval to it": {value: "Sun, 06 Nov 1994 08:49:37 GMT", wantDelay: 37 * time.Second, wantForm: FormIMFFixdate},
		"an IMF-fixdate equal to now is no wait":             {value: "Sun, 06 Nov 1994 08:49:00 GMT", wantDelay: 0, wantForm: FormIMFFixdate},
		"an IMF-fixdate in the past is no wait":              {value: "Sun, 06 Nov 1994 08:48:00 GMT", wantDelay: 0, wantForm: FormIMFFixdate},
		"an IMF-fixdate with spaces around is accepted":      {value: " Sun, 06 Nov 1994 08:49:37 GMT ", wantDelay: 37 * time.Second, wantForm: FormIMFFixdate},
		"an IMF-fixdate in UTC is rejected":                  {value: "Sun, 06 Nov 1994 08:49:37 UTC", wantErr: errNotGMT},
		"an IMF-fixdate with a numeric zone is rejected":     {value: "Sun, 06 Nov 1994 08:49:37 +0000", wantErr: errNotGMT},
		"an IMF-fixdate with the wrong weekday is rejected":  {value: "Mon, 06 Nov 1994 08:49:37 GMT", wantErr: errWeekday},
		"a lower-case month is rejected":                     {value: "Sun, 06 nov 1994 08:49:37 GMT", wantErr: errDateFormat},
		"a lower-case weekday is rejected":                   {value: "sun, 06 Nov 1994 08:49:37 GMT", wantErr: errDateFormat},
		"a one-digit day is rejected in IMF-fixdate":         {value: "Sun, 6 Nov 1994 08:49:37 GMT", wantErr: errDateFormat},
		"a two-digit year is rejected in IMF-fixdate":        {value: "Sun, 06 Nov 94 08:49:37 GMT", wantErr: errDateFormat},
		"a German month name is rejected":                    {value: "Sun, 06 Okt 1994 08:49:37 GMT", wantErr: errDateFormat},
		"the 31st of February is rejected":                   {value: "Tue, 31 Feb 1994 08:49:37 GMT", wantErr: errDateRange},
		"hour 24 is rejected":                                {value: "Sun, 06 Nov 1994 24:00:00 GMT", wantErr: errDateRange},
		"the 29th of February of a leap year is accepted":    {value: "Tue, 29 Feb 2028 00:00:00 GMT", received: time.Date(2028, 2, 28, 23, 59, 0, 0, time.UTC), wantDelay: time.Minute, wantForm: FormIMFFixdate},
		"the 29th of February of 2027 is rejected":           {value: "Mon, 29 Feb 2027 00:00:00 GMT", wantErr: errDateRange},
		"a date centuries ahead saturates":                   {value: "Fri, 31 Dec 9999 23:59:59 GMT", wantDelay: MaxDelay, wantForm: FormIMFFixdate},

		// RFC 850
		"an RFC 850 date in the future is the interval to it": {value: "Sunday, 06-Nov-94 08:49:37 GMT", wantDelay: 37 * time.Second, wantForm: FormRFC850},
		"an RFC 850 date equal to now is no wait":             {value: "Sunday, 06-Nov-94 08:49:00 GMT", wantDelay: 0, wantForm: FormRFC850},
		"an RFC 850 date in the past is no wait":              {value: "Sunday, 06-Nov-94 08:40:00 GMT", wantDelay: 0, wantForm: FormRFC850},
		"an RFC 850 date with the wrong weekday is rejected":  {value: "Monday, 06-Nov-94 08:49:37 GMT", wantErr: errWeekday},
		"an RFC 850 date with a short weekday is rejected":    {value: "Sun, 06-Nov-94 08:49:37 GMT", wantErr: errDateFormat},
		"an RFC 850 date in PST is rejected":                  {value: "Sunday, 06-Nov-94 08:49:37 PST", wantErr: errNotGMT},

		// asctime
		"an asctime date in the future is the interval to it": {value: "Sun Nov  6 08:49:37 1994", wantDelay: 37 * time.Second, wantForm: FormAsctime},
		"an asctime date with a two-digit day is accepted":    {value: "Sun Nov 06 08:49:37 1994", wantDelay: 37 * time.Second, wantForm: FormAsctime},
		"an asctime date equal to now is no wait":             {value: "Sun Nov  6 08:49:00 1994", wantDelay: 0, wantForm: FormAsctime},
		"an asctime date in the past is no wait":              {value: "Sun Nov  6 07:00:00 1994", wantDelay: 0, wantForm: FormAsctime},
		"an asctime date with the wrong weekday is rejected":  {value: "Sat Nov  6 08:49:37 1994", wantErr: errWeekday},
		"an asctime date with a zone is rejected":             {value: "Sun Nov  6 08:49:37 1994 GMT", wantErr: errDateFormat},

		// Date header and skew
		"a client clock running fast does not shorten the wait": {
			value: "Sun, 06 Nov 1994 08:49:37 GMT", received: time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC), date: "Sun, 06 Nov 1994 08:48:37 GMT",
			wantDelay: 60 * time.Second, wantForm: FormIMFFixdate, wantSkew: 60 * time.Second, wantHas: true,
		},
		"a client clock running slow keeps the longer local interval": {
			value: "Sun, 06 Nov 1994 08:49:37 GMT", received: time.Date(1994, 11, 6, 8, 47, 37, 0, time.UTC), date: "Sun, 06 Nov 1994 08:48:37 GMT",
			wantDelay: 120 * time.Second, wantForm: FormIMFFixdate, wantSkew: -60 * time.Second, wantHas: true,
		},
		"seconds are not changed by the Date header but the skew is reported": {
			value: "5", date: "Sun, 06 Nov 1994 08:48:30 GMT",
			wantDelay: 5 * time.Second, wantForm: FormSeconds, wantSkew: 30 * time.Second, wantHas: true,
		},
		"a malformed Date header is ignored": {
			value: "Sun, 06 Nov 1994 08:49:37 GMT", date: "yesterday",
			wantDelay: 37 * time.Second, wantForm: FormIMFFixdate,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			at := tc.received
			if at.IsZero() {
				at = received
			}
			got, err := ParseRetryAfter(tc.value, at, tc.date)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ParseRetryAfter(%q) error = %v, want %v", tc.value, err, tc.wantErr)
				}
				if got != (Hint{}) {
					t.Fatalf("ParseRetryAfter(%q) = %+v with an error, want the zero Hint", tc.value, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRetryAfter(%q) error = %v, want none", tc.value, err)
			}
			want := Hint{Delay: tc.wantDelay, Form: tc.wantForm, Skew: tc.wantSkew, HasSkew: tc.wantHas}
			if got != want {
				t.Fatalf("ParseRetryAfter(%q) = %+v, want %+v", tc.value, got, want)
			}
		})
	}
}

// TestParseHTTPDateFiftyYearRule checks RFC 9110's rule for RFC 850's two-digit
// year on both sides of the boundary (now + 50 years), with now 2026-05-01 12:00:00.
func TestParseHTTPDateFiftyYearRule(t *testing.T) {
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
			got, form, err := parseHTTPDate(tc.value, now)
			if err != nil || form != FormRFC850 || !got.Equal(tc.want) {
				t.Fatalf("parseHTTPDate(%q) = %v, %v, %v; want %v, rfc850, nil", tc.value, got, form, err, tc.want)
			}
		})
	}
	// The rule looks at now: late in a century, small years belong to the next one.
	late := time.Date(2095, 1, 1, 0, 0, 0, 0, time.UTC)
	got, _, err := parseHTTPDate(rfc850For(time.Date(2110, 1, 1, 0, 0, 0, 0, time.UTC)), late)
	if err != nil || got.Year() != 2110 {
		t.Fatalf("two-digit year 10 seen in 2095 = %v, %v; want 2110", got, err)
	}
}

// rfc850For formats t as an RFC 850 date (test helper; the weekday is computed).
func rfc850For(t time.Time) string { return t.UTC().Format("Monday, 02-Jan-06 15:04:05 GMT") }

// TestParseHTTPDateAgreesWithTheStandardLibrary cross-checks the hand-written
// calendar arithmetic against package time for IMF-fixdate and asctime over a
// wide range of instants (RFC 850 is left out: http.ParseTime's pivot differs).
func TestParseHTTPDateAgreesWithTheStandardLibrary(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for sec := int64(-5e9); sec < 2e10; sec += 7_777_777 {
		at := time.Unix(sec, 0).UTC()
		for _, layout := range []string{time.RFC1123, time.ANSIC} {
			s := at.Format(layout)
			if layout == time.RFC1123 {
				s = at.Format("Mon, 02 Jan 2006 15:04:05 GMT")
			}
			got, _, err := parseHTTPDate(s, now)
			if err != nil || !got.Equal(at) {
				t.Fatalf("parseHTTPDate(%q) = %v, %v; want %v", s, got, err, at)
			}
		}
	}
}
