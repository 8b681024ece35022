package retrypolicy

import (
	"errors"
	"testing"
	"time"
)

// received is the wall time the response arrived in the parser tables.
var received = time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC) // a Sunday

// parseRetryAfterCases are the cases of TestParseRetryAfter.
var parseRetryAfterCases = map[string]struct {
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

func TestParseRetryAfter(t *testing.T) {
	tests := parseRetryAfterCases
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
