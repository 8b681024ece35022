package retrypolicy

import (
	"errors"
	"math/big"
	"strconv"
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

// FuzzParseGRPCTimeout checks the parser against gRPC's grammar, spelled
// differently: accepted exactly when the value is 1 to 8 ASCII digits and one
// of H M S m u n, and then the product of the number and the unit, computed
// without overflow and saturated at MaxDelay.
func FuzzParseGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1S", "250m", "0n", "99999999H", "123456789S", "S", "+1S", " 1S", "1s", "1ms", "", "１S"} {
		f.Add(s)
	}
	units := map[byte]int64{'H': int64(time.Hour), 'M': int64(time.Minute), 'S': int64(time.Second),
		'm': int64(time.Millisecond), 'u': int64(time.Microsecond), 'n': 1}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseGRPCTimeout(v)
		unit, unitOK := int64(0), false
		if v != "" {
			unit, unitOK = units[v[len(v)-1]]
		}
		digits := strings.TrimSuffix(v, v[max(len(v)-1, 0):])
		valid := unitOK && len(digits) >= 1 && len(digits) <= 8 && strings.Trim(digits, "0123456789") == ""
		if valid != (err == nil) {
			t.Fatalf("ParseGRPCTimeout(%q) = %v, %v; the grammar says valid=%v", v, got, err, valid)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Header != "grpc-timeout" || got != 0 {
				t.Fatalf("ParseGRPCTimeout(%q) = %v, %v", v, got, err)
			}
			return
		}
		n, _ := strconv.ParseInt(digits, 10, 64)
		want := new(big.Int).Mul(big.NewInt(n), big.NewInt(unit))
		if want.Cmp(big.NewInt(int64(MaxDelay))) > 0 {
			want = big.NewInt(int64(MaxDelay))
		}
		if int64(got) != want.Int64() {
			t.Fatalf("ParseGRPCTimeout(%q) = %d, want %s", v, got, want)
		}
	})
}

// FuzzParseGRPCPushback checks that a value is a wait exactly when it is ASCII
// digits (the number of milliseconds, saturated at MaxDelay), that "-digits"
// is refused as negative, and anything else as malformed: every error means
// no retry.
func FuzzParseGRPCPushback(f *testing.F) {
	for _, s := range []string{"0", "800", "-1", "+5", "1.5", " 5", "", "-", "99999999999999999999", "9223372036854"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseGRPCPushback(v)
		isDigits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
		switch {
		case isDigits(v):
			if err != nil {
				t.Fatalf("ParseGRPCPushback(%q): %v", v, err)
			}
			n, _ := new(big.Int).SetString(v, 10)
			n.Mul(n, big.NewInt(int64(time.Millisecond)))
			if n.Cmp(big.NewInt(int64(MaxDelay))) > 0 {
				n = big.NewInt(int64(MaxDelay))
			}
			if int64(got) != n.Int64() {
				t.Fatalf("ParseGRPCPushback(%q) = %d, want %s", v, got, n)
			}
		case strings.HasPrefix(v, "-") && isDigits(v[1:]):
			if !errors.Is(err, errPushbackNeg) || got != 0 {
				t.Fatalf("ParseGRPCPushback(%q) = %v, %v; want negative", v, got, err)
			}
		default:
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Header != "grpc-retry-pushback-ms" || errors.Is(err, errPushbackNeg) || got != 0 {
				t.Fatalf("ParseGRPCPushback(%q) = %v, %v; want malformed", v, got, err)
			}
		}
	})
}

// FuzzDecideGRPC checks DecideAt's gRPC rows on arbitrary calls: never a
// retry of OK, of a status the policy does not list, of a call whose server
// asked for none, or of a method that is not replayable (a refused stream
// aside); never a wait shorter than the pushback; never a retry whose next
// attempt cannot fit the deadline.
func FuzzDecideGRPC(f *testing.F) {
	f.Add(1, uint32(14), false, true, false, int64(800e6), true, int64(10e9), 0.5)
	f.Add(2, uint32(8), false, true, true, int64(0), true, int64(0), 0.0)
	f.Add(1, uint32(0), false, true, false, int64(0), false, int64(0), 1.0)
	f.Add(1, uint32(14), true, false, false, int64(0), false, int64(2e9), 0.3)
	f.Fuzz(func(t *testing.T, number int, code uint32, refused, replayable, noRetry bool, pushbackNs int64, hasPushback bool,
		deadlineNs int64, random float64) {
		p := compile(t, func(c *Config) {
			grpcConfig(c)
			c.RetryAfterSpread = time.Second
		})
		a := Attempt{Number: number, GRPC: true, GRPCStatus: code, Replayable: replayable, Rewindable: true, NoRetry: noRetry,
			Hint: Hint{Delay: time.Duration(abs64(pushbackNs))}, HasHint: hasPushback, Random: random}
		if refused {
			a.Err = Refused
		}
		if deadlineNs != 0 {
			a.Deadline = now.Add(time.Duration(deadlineNs))
		}
		d := p.DecideAt(now, a)
		if d.Action != Retry {
			if d.Outcome == "" {
				t.Fatalf("%v without an outcome", d.Action)
			}
			return
		}
		if !refused && (code == 0 || !p.RetriesGRPCStatus(code) || noRetry || !replayable) {
			t.Fatalf("retry of status %d, replayable %v, no-retry %v", code, replayable, noRetry)
		}
		if !refused && hasPushback && d.Delay < a.Hint.Delay {
			t.Fatalf("delay %v shorter than the pushback %v", d.Delay, a.Hint.Delay)
		}
		if number >= p.MaxAttempts() {
			t.Fatalf("retry after attempt %d of %d", number, p.MaxAttempts())
		}
		if !a.Deadline.IsZero() && now.Add(d.Delay).Add(p.Reserve()).After(a.Deadline) {
			t.Fatalf("retry after %v cannot fit the deadline %v", d.Delay, a.Deadline.Sub(now))
		}
	})
}
