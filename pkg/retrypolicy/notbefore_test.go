package retrypolicy

import (
	"testing"
	"time"
)

func TestCeilSecond(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		in, want time.Time
	}{
		"a whole second stays":                     {base, base},
		"700 ms past rounds up to the next second": {base.Add(700 * time.Millisecond), base.Add(time.Second)},
		"1 ns past rounds up to the next second":   {base.Add(time.Nanosecond), base.Add(time.Second)},
		"999 ms past rounds up to the next second": {base.Add(999 * time.Millisecond), base.Add(time.Second)},
		"the zero time stays zero":                 {time.Time{}, time.Time{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CeilSecond(tc.in); !got.Equal(tc.want) {
				t.Fatalf("CeilSecond(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestNotBeforeIsNeverEarlierThanTheServerAllowed: receipt at 12:00:00.7 plus
// Retry-After: 60 may not be announced as 12:01:00.
func TestNotBeforeIsNeverEarlierThanTheServerAllowed(t *testing.T) {
	received := time.Date(2026, 11, 30, 12, 0, 0, 700e6, time.UTC)
	got := FormatNotBefore(CeilSecond(received.Add(60 * time.Second)))
	if want := "Mon, 30 Nov 2026 12:01:01 GMT"; got != want {
		t.Fatalf("Not-Before = %q, want %q", got, want)
	}
}

func TestDateSkew(t *testing.T) {
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
			skew, ok := DateSkew(tc.date, received)
			if skew != tc.skew || ok != tc.wantOK {
				t.Fatalf("DateSkew(%q) = %v, %v; want %v, %v", tc.date, skew, ok, tc.skew, tc.wantOK)
			}
		})
	}
}
