package httpdate

import (
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
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
			if got := Ceil(tc.in); !got.Equal(tc.want) {
				t.Fatalf("Ceil(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestNotBeforeIsNeverEarlierThanTheServerAllowed: receipt at 12:00:00.7 plus
// Retry-After: 60 may not be announced as 12:01:00.
func TestNotBeforeIsNeverEarlierThanTheServerAllowed(t *testing.T) {
	received := time.Date(2026, 11, 30, 12, 0, 0, 700e6, time.UTC)
	got := Format(Ceil(received.Add(60 * time.Second)))
	if want := "Mon, 30 Nov 2026 12:01:01 GMT"; got != want {
		t.Fatalf("Not-Before = %q, want %q", got, want)
	}
}
