package retrypolicy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/httpdate"
)

// FuzzParseRetryAfter checks R1's invariants on arbitrary input: no panic, never a
// negative wait, every digit string accepted (saturating, never an error), and
// dates accepted only in their exact canonical shape.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "  120 ", "+5", "-1", "1.5", "1e3", "１２", "99999999999999999999999", "",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Mon, 06 Nov 1994 08:49:37 GMT", "Sun, 06 nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC"} {
		f.Add(s, "Sun, 06 Nov 1994 08:48:37 GMT", received.Unix())
	}
	f.Fuzz(func(t *testing.T, value, date string, recvUnix int64) {
		at := time.Unix(recvUnix%(1<<40), 0).UTC()
		h, err := ParseRetryAfter(value, at, date)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T, want *ParseError", err)
			}
			if v := httpdate.TrimOWS(value); v != "" && strings.Trim(v, "0123456789") == "" {
				t.Fatalf("digit string %q rejected: %v", value, err)
			}
			return
		}
		if h.Delay < 0 {
			t.Fatalf("negative delay %v for %q", h.Delay, value)
		}
		v := httpdate.TrimOWS(value)
		switch h.Form {
		case FormSeconds:
			if strings.Trim(v, "0123456789") != "" {
				t.Fatalf("%q accepted as seconds", value)
			}
		case FormIMFFixdate, FormAsctime, FormRFC850:
			d, _, err := parseHTTPDate(v, at)
			if err != nil {
				t.Fatalf("date %q accepted then rejected: %v", v, err)
			}
			var canon string
			switch h.Form {
			case FormIMFFixdate:
				canon = d.Format("Mon, 02 Jan 2006 15:04:05 GMT")
			case FormRFC850:
				canon = d.Format("Monday, 02-Jan-06 15:04:05 GMT")
			case FormAsctime:
				canon = d.Format(time.ANSIC)
				if v[8] == '0' {
					canon = d.Format("Mon Jan 02 15:04:05 2006")
				}
			}
			if canon != v && !strings.Contains(v, ":60 ") && !strings.HasSuffix(v, ":60") {
				t.Fatalf("date %q accepted but its canonical form is %q", v, canon)
			}
			if want := max(d.Sub(at), 0); h.Delay < want {
				t.Fatalf("delay %v shorter than date − received %v", h.Delay, want)
			}
		default:
			t.Fatalf("accepted with form %v", h.Form)
		}
	})
}

// FuzzDecide checks the invariants of R2–R5 on arbitrary attempts: never a
// negative delay, never a delay below the hint, never Retry for a non-replayable
// ambiguous write or a non-replayable retryable status, never more transmissions
// than maxAttempts, never a Retry whose next attempt cannot fit the deadline.
func FuzzDecide(f *testing.F) {
	f.Add(1, 503, uint8(0), true, true, false, int64(0), false, int64(10e9), 0.0, 4, int64(0))
	f.Add(4, 429, uint8(0), true, true, false, int64(30e9), true, int64(12e9), 1.0, 10, int64(0))
	f.Add(1, 503, uint8(2), false, true, false, int64(0), false, int64(0), 0.5, 3, int64(2e9))
	f.Add(2, 0, uint8(1), false, true, false, int64(0), false, int64(60e9), 0.9, 10, int64(1e9))
	f.Fuzz(func(t *testing.T, number, status int, class uint8, replayable, rewindable, nested bool,
		hintNs int64, hasHint bool, deadlineNs int64, random float64, maxAttempts int, perTry int64) {
		maxAttempts = 1 + abs(maxAttempts)%10
		perTry = abs64(perTry) % int64(20*time.Second)
		p := compile(t, func(c *Config) {
			c.MaxAttempts = maxAttempts
			c.PerTryTimeout = time.Duration(perTry)
			c.RetryAfterSpread = time.Second
			c.RetryOnStatus = []int{408, 425, 429, 500, 502, 503, 504}
		})
		a := Attempt{Number: number, Status: status, Err: ErrorClass(class % 4), Replayable: replayable,
			Rewindable: rewindable || replayable, Nested: nested, Hint: Hint{Delay: time.Duration(abs64(hintNs))},
			HasHint: hasHint, Random: random}
		if deadlineNs != 0 {
			a.Deadline = now.Add(time.Duration(deadlineNs))
		}
		d := p.DecideAt(now, a)
		if d.Action != Retry {
			if d.Outcome == "" {
				t.Fatalf("%v without an outcome", d.Action)
			}
			if d.Action == Defer && d.Outcome == OutcomeDeferred && d.NotBefore.Before(now.Add(a.Hint.Delay)) {
				t.Fatalf("deferred to %v, before the hint %v", d.NotBefore, a.Hint.Delay)
			}
			return
		}
		if d.Delay < 0 {
			t.Fatalf("negative delay %v", d.Delay)
		}
		if hasHint && a.Err == NoError && d.Delay < a.Hint.Delay {
			t.Fatalf("delay %v shorter than the server's %v", d.Delay, a.Hint.Delay)
		}
		if !replayable && (a.Err == Ambiguous || a.Err == NoError) {
			t.Fatalf("retry of a non-replayable request after %v/%d", a.Err, status)
		}
		if a.Err == Canceled || nested || number >= maxAttempts {
			t.Fatalf("retry after %v, nested %v, attempt %d of %d", a.Err, nested, number, maxAttempts)
		}
		if !a.Deadline.IsZero() && now.Add(d.Delay).Add(p.reserve).After(a.Deadline) {
			t.Fatalf("retry after %v cannot fit the deadline %v", d.Delay, a.Deadline.Sub(now))
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -(x + 1)
	}
	return x
}

func abs64(x int64) int64 {
	if x < 0 {
		return -(x + 1)
	}
	return x
}
