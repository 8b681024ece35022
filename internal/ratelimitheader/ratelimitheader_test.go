package ratelimitheader

import (
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/retrydev/retry-operator/internal/testing/headertest"
)

// rlNow is 2026-05-01 12:00:00Z, Unix 1777636800.
var rlNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// parseRateLimitCases are the cases of TestParseRateLimit.
var parseRateLimitCases = map[string]struct {
	header http.Header
	want   Hint
}{
	"no rate-limit header gives no hint": {
		header: headertest.Of("Content-Type", "text/plain"),
		want:   Hint{Remaining: -1},
	},
	"the structured form with r=0 and t=30 holds for 30s": {
		header: headertest.Of("RateLimit", `"default";r=0;t=30`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: 30 * time.Second, HasReset: true},
	},
	"the structured form with quota left does not hold": {
		header: headertest.Of("RateLimit", `"default";r=50;t=30`),
		want:   Hint{Form: FormStructured, Remaining: 50},
	},
	"a token name and extra parameters are accepted": {
		header: headertest.Of("RateLimit", `day;r=0;t=3600;pk=:cGsx:;x=?1;y=1.5`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: time.Hour, HasReset: true},
	},
	"of several policies the exhausted one with the latest reset decides": {
		header: headertest.Of("RateLimit", `"burst";r=5;t=1, "day";r=0;t=60,"hour";r=0;t=20`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: time.Minute, HasReset: true},
	},
	"a 15-digit t saturates instead of overflowing": {
		header: headertest.Of("RateLimit", `"default";r=0;t=999999999999999`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: maxDelay, HasReset: true},
	},
	"a repeated parameter: the last one wins": {
		header: headertest.Of("RateLimit", `"default";r=0;t=5;t=9`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: 9 * time.Second, HasReset: true},
	},
	"an exhausted item without t takes w of the same policy in RateLimit-Policy": {
		header: headertest.Of("RateLimit", `"default";r=0`, "RateLimit-Policy", `"other";q=5;w=10, "default";q=100;w=60`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: time.Minute, HasReset: true},
	},
	"a policy of another name, or a token of the same text, is not used": {
		header: headertest.Of("RateLimit", `"default";r=0`, "RateLimit-Policy", `default;q=100;w=60, "defaults";w=9`),
		want:   Hint{Form: FormStructured, Remaining: 0},
	},
	"escaped policy names compare by content": {
		header: headertest.Of("RateLimit", `"a\"b";r=0`, "RateLimit-Policy", `"a\"b";q=1;w=7`),
		want:   Hint{Form: FormStructured, Remaining: 0, Reset: 7 * time.Second, HasReset: true},
	},
	"a malformed RateLimit-Policy is ignored and reported": {
		header: headertest.Of("RateLimit", `"default";r=0`, "RateLimit-Policy", `"default";w=-1`),
		want:   Hint{Form: FormStructured, Remaining: 0, Malformed: "Ratelimit-Policy", Reason: "not-a-non-negative-integer"},
	},
	"a decimal reset is malformed": {
		header: headertest.Of("RateLimit", `"default";r=0;t=30.5`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "not-a-non-negative-integer"},
	},
	"a negative remaining is malformed": {
		header: headertest.Of("RateLimit", `"default";r=-1;t=30`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "not-a-non-negative-integer"},
	},
	"an item without r is malformed": {
		header: headertest.Of("RateLimit", `"default";t=30`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "missing-r"},
	},
	"the older dictionary form is not a List and is malformed": {
		header: headertest.Of("RateLimit", `limit=100, remaining=0, reset=30`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "structured-field-syntax"},
	},
	"a trailing comma is malformed": {
		header: headertest.Of("RateLimit", `"default";r=0;t=30,`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "structured-field-syntax"},
	},
	"an inner list is refused": {
		header: headertest.Of("RateLimit", `("a" "b");r=0;t=30`),
		want:   Hint{Remaining: -1, Malformed: "Ratelimit", Reason: "unsupported-member"},
	},
	"a malformed RateLimit falls back to the X- headers": {
		header: headertest.Of("RateLimit", `r=0;t=30,`, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "4"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: 4 * time.Second, HasReset: true, Malformed: "Ratelimit", Reason: "structured-field-syntax"},
	},
	"RateLimit-Remaining and -Reset, delta seconds": {
		header: headertest.Of("RateLimit-Remaining", "0", "RateLimit-Reset", " 30 "),
		want:   Hint{Form: FormSplit, Remaining: 0, Reset: 30 * time.Second, HasReset: true},
	},
	"X-RateLimit-Reset below 1e9 is delta seconds": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "999999999"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: 999999999 * time.Second, HasReset: true},
	},
	"X-RateLimit-Reset of 1e9 or more is epoch seconds": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1777636830"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: 30 * time.Second, HasReset: true},
	},
	"an epoch reset in the past gives no wait": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1777636770"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: 0, HasReset: true},
	},
	"an epoch reset is measured from the server's Date too when the local clock is fast": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1777636830", "Date", "Fri, 01 May 2026 11:59:00 GMT"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: 90 * time.Second, HasReset: true},
	},
	"a huge epoch reset saturates instead of failing": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999999999999999999"),
		want:   Hint{Form: FormX, Remaining: 0, Reset: maxDelay, HasReset: true},
	},
	"a signed remaining is malformed": {
		header: headertest.Of("X-RateLimit-Remaining", "-0", "X-RateLimit-Reset", "30"),
		want:   Hint{Remaining: -1, Malformed: "X-Ratelimit-Remaining", Reason: "not-an-integer"},
	},
	"a fractional reset is malformed, the remaining still counts": {
		header: headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1.5"),
		want:   Hint{Form: FormX, Remaining: 0, Malformed: "X-Ratelimit-Reset", Reason: "not-an-integer"},
	},
	"an empty remaining is malformed": {
		header: headertest.Of("X-RateLimit-Remaining", " ", "X-RateLimit-Reset", "3"),
		want:   Hint{Remaining: -1, Malformed: "X-Ratelimit-Remaining", Reason: "empty"},
	},
	"a remaining without a reset gives no reset": {
		header: headertest.Of("X-RateLimit-Remaining", "0"),
		want:   Hint{Form: FormX, Remaining: 0},
	},
	"the structured form wins over the X- headers": {
		header: headertest.Of("RateLimit", `"default";r=3;t=1`, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60"),
		want:   Hint{Form: FormStructured, Remaining: 3},
	},
}

func TestParseRateLimit(t *testing.T) {
	tests := parseRateLimitCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Parse(tc.header, rlNow)
			if got != tc.want {
				t.Fatalf("Parse = %+v\nwant            %+v", got, tc.want)
			}
		})
	}
}

func TestParseRateLimitRepeatedFieldLines(t *testing.T) {
	h := http.Header{"X-Ratelimit-Remaining": {"0", "0"}, "X-Ratelimit-Reset": {"3"}}
	want := Hint{Remaining: -1, Malformed: "X-Ratelimit-Remaining", Reason: "repeated-field"}
	if got := Parse(h, rlNow); got != want {
		t.Fatalf("two X-RateLimit-Remaining lines: %+v, want %+v", got, want)
	}
	h = http.Header{"Ratelimit": {`"a";r=4;t=1`, `"b";r=0;t=8`}}
	want = Hint{Form: FormStructured, Remaining: 0, Reset: 8 * time.Second, HasReset: true}
	if got := Parse(h, rlNow); got != want {
		t.Fatalf("two RateLimit lines are one list: %+v, want %+v", got, want)
	}
}

func TestRateLimitHintHold(t *testing.T) {
	tests := map[string]struct {
		hint   Hint
		wait   time.Duration
		isHold bool
	}{
		"remaining 0 with a future reset holds":  {Hint{Form: FormX, Remaining: 0, Reset: 3 * time.Second, HasReset: true}, 3 * time.Second, true},
		"remaining 0 with a past reset does not": {Hint{Form: FormX, Remaining: 0, Reset: 0, HasReset: true}, 0, false},
		"remaining 0 without a reset does not":   {Hint{Form: FormX, Remaining: 0}, 0, false},
		"remaining 1 does not":                   {Hint{Form: FormX, Remaining: 1, Reset: time.Second, HasReset: true}, time.Second, false},
		"no hint does not":                       {Hint{Remaining: -1}, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if d, ok := tc.hint.Hold(); d != tc.wait || ok != tc.isHold {
				t.Fatalf("Hold = %v, %v; want %v, %v", d, ok, tc.wait, tc.isHold)
			}
		})
	}
}

func TestParseRateLimitDoesNotAllocate(t *testing.T) {
	for name, h := range map[string]http.Header{
		"structured": headertest.Of("RateLimit", `"default";r=0;t=30`),
		"policy":     headertest.Of("RateLimit", `"default";r=0`, "RateLimit-Policy", `"default";q=100;w=60;pk=:cGsx:`),
		"x epoch":    headertest.Of("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1777636830", "Date", "Fri, 01 May 2026 11:59:00 GMT"),
		"malformed":  headertest.Of("RateLimit", `"default";r=0;t=30,`, "RateLimit-Remaining", "x"),
	} {
		if n := testing.AllocsPerRun(100, func() { Parse(h, rlNow) }); n != 0 {
			t.Fatalf("Parse(%s) allocates %v times, want 0", name, n)
		}
	}
}

// sfvSummary is what pacing takes from one RateLimit line, computed from
// httpsfv's full parse; the allocation-free scanner must agree with it.
type sfvSummary struct {
	members   int
	remaining int64
	reset     int64
	hasReset  bool
}

// summarizeHTTPSFV parses line with httpsfv and applies the RateLimit rules.
// supported is false when the list uses what the scanner refuses on purpose
// (inner lists, Dates, Display Strings); valid is false when the RateLimit rules
// reject it (r missing or not a non-negative Integer, t not one).
func summarizeHTTPSFV(line string) (sum sfvSummary, parsed, supported, valid bool) {
	l, err := httpsfv.UnmarshalList([]string{line})
	if err != nil {
		return sum, false, false, false
	}
	sum.remaining = -1
	supported, valid = true, true
	unsupported := func(v any) bool {
		switch v.(type) {
		case time.Time, httpsfv.DisplayString:
			return true
		}
		return false
	}
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok || unsupported(it.Value) {
			supported = false
			continue
		}
		for _, k := range it.Params.Names() {
			if v, _ := it.Params.Get(k); unsupported(v) {
				supported = false
			}
		}
		rv, hasR := it.Params.Get("r")
		tv, hasT := it.Params.Get("t")
		r, rOK := rv.(int64)
		tt, tOK := tv.(int64)
		if !hasR || !rOK || r < 0 || hasT && (!tOK || tt < 0) {
			valid = false
			continue
		}
		sum.members++
		if sum.remaining < 0 || r < sum.remaining {
			sum.remaining = r
		}
		if r == 0 && hasT && (!sum.hasReset || tt > sum.reset) {
			sum.reset, sum.hasReset = tt, true
		}
	}
	return sum, true, supported, valid
}

// FuzzRateLimitAgreesWithHTTPSFV holds the allocation-free scanner equal to
// github.com/dunglas/httpsfv: every RateLimit line it accepts, httpsfv parses to
// the same remaining and reset; every line httpsfv parses that uses only the
// supported shapes and obeys the RateLimit rules, it accepts.
func FuzzRateLimitAgreesWithHTTPSFV(f *testing.F) {
	for _, s := range []string{
		`"default";r=0;t=30`, `"default";r=50;t=30`, `day;r=0;t=3600;pk=:cGsx:;x=?1;y=1.5`,
		`"burst";r=5;t=1, "day";r=0;t=60,"hour";r=0;t=20`, `"default";r=0;t=5;t=9`, `"a\"b";r=0`,
		`"default";r=0;t=30.5`, `"default";r=-1`, `limit=100, remaining=0`, `"d";r=0;t=30,`,
		`("a" "b");r=0`, `"d";r=0;t=@1`, `%"x";r=0`, `*;r=1`, `"d";r=000000000000001`, `"d";r=1;t=-0`,
		`  "d";r=0;t=1  ,	"e";r=2`, `"d";r=0;pk=:AAA=:`, `"d";r=0;pk=:A===:`, `"d";r=0;z=123456789012.123`,
		`"d" ;r=0`, `"d";r=0; t=4`, `"d";R=0`, ``, `   `,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var acc rlAcc
		reason := acc.parseList(line)
		want, parsed, supported, valid := summarizeHTTPSFV(line)
		if reason == "" {
			if !parsed {
				t.Fatalf("%q accepted by the scanner, rejected by httpsfv", line)
			}
			got := sfvSummary{members: acc.members, remaining: acc.remaining, reset: acc.reset, hasReset: acc.hasReset}
			if acc.members == 0 {
				got.remaining = -1
			}
			if !valid || got != want {
				t.Fatalf("%q: scanner %+v, httpsfv %+v (valid %v)", line, got, want, valid)
			}
			return
		}
		if parsed && supported && valid {
			t.Fatalf("%q rejected by the scanner (%s) though httpsfv parses it and it obeys the RateLimit rules", line, reason)
		}
	})
}

// FuzzParseRateLimit: no panic on any header values, never a negative wait, and
// a hint only from a form whose remaining is known.
func FuzzParseRateLimit(f *testing.F) {
	f.Add(`"default";r=0;t=30`, `"default";q=1;w=2`, "0", "1777636830", "Fri, 01 May 2026 11:59:00 GMT")
	f.Add(`x`, `"default";w=0`, "-1", "1.5", "")
	f.Add(`"d";r=0;t=999999999999999`, `"d";w=999999999999999`, "0", "99999999999999999999", "")
	f.Add(`"d";r=0`, `"d";w=999999999999999`, "0", "99999999999999999999", "")
	f.Fuzz(func(t *testing.T, rl, policy, remaining, reset, date string) {
		h := http.Header{"Ratelimit": {rl}, "Ratelimit-Policy": {policy}, "X-Ratelimit-Remaining": {remaining},
			"X-Ratelimit-Reset": {reset}, "Date": {date}}
		got := Parse(h, rlNow)
		if got.Reset < 0 {
			t.Fatalf("negative reset %v", got.Reset)
		}
		if got.Form == FormNone && (got.Remaining != -1 || got.HasReset) {
			t.Fatalf("no form but %+v", got)
		}
		if got.Form != FormNone && got.Remaining < 0 {
			t.Fatalf("form %v without a remaining: %+v", got.Form, got)
		}
	})
}
