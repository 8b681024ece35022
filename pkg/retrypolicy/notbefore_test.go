package retrypolicy

import (
	"testing"
	"time"
)

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
