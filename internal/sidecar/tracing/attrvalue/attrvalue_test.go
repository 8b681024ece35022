package attrvalue_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
)

func TestClean(t *testing.T) {
	for name, tc := range map[string]struct {
		in    string
		limit int
		want  string
	}{
		"a short valid value is kept":             {"payments-api/2.1", 256, "payments-api/2.1"},
		"an invalid byte is replaced":             {"evil\xff", 256, "evil\uFFFD"},
		"a run of invalid bytes is one U+FFFD":    {"a\xff\xfe\xfdb", 256, "a\uFFFDb"},
		"a long value is cut to the limit":        {strings.Repeat("s", 300), 256, strings.Repeat("s", 256)},
		"a cut never splits a 2-byte character":   {"x" + strings.Repeat("é", 300), 256, "x" + strings.Repeat("é", 127)},
		"a cut never splits a 4-byte character":   {"ab" + strings.Repeat("😀", 3), 9, "ab😀"},
		"a cut at a character boundary keeps all": {strings.Repeat("é", 300), 256, strings.Repeat("é", 128)},
		"a replacement that would pass the limit is dropped": {
			strings.Repeat("s", 254) + "\xff", 256, strings.Repeat("s", 254)},
		"an invalid byte past the limit is cut, not replaced": {
			strings.Repeat("s", 256) + "\xff", 256, strings.Repeat("s", 256)},
		"a truncated character at the cut is dropped": {"abc\xe2\x82", 4, "abc"},
		"an empty value": {"", 256, ""},
		"a character longer than the limit is dropped": {"évian", 1, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := attrvalue.Clean(tc.in, tc.limit)
			if got != tc.want {
				t.Errorf("Clean(%.40q, %d) = %.40q (%d bytes), want %.40q (%d bytes)", tc.in, tc.limit, got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

// A cut value is a copy: a span holding 256 bytes of a 900 KB header does not
// keep the 900 KB alive. A value kept as it is costs nothing.
func TestCleanCopiesOnlyWhatItChanges(t *testing.T) {
	long := strings.Repeat("s", 900<<10)
	if got := attrvalue.Clean(long, 256); unsafe.StringData(got) == unsafe.StringData(long) {
		t.Error("the cut value shares the memory of the whole header value")
	}
	short := "payments-api/2.1"
	if n := testing.AllocsPerRun(100, func() { _ = attrvalue.Clean(short, 256) }); n != 0 {
		t.Errorf("Clean of a valid short value allocates %v times, want 0", n)
	}
	vs := []string{"1.1 edge-cdn", "1.1 varnish"}
	if n := testing.AllocsPerRun(100, func() { _ = attrvalue.Values(vs, 256) }); n != 0 {
		t.Errorf("Values of valid short values allocates %v times, want 0", n)
	}
}

func TestValues(t *testing.T) {
	for name, tc := range map[string]struct {
		in    []string
		limit int
		want  []string
	}{
		"values within the limit together are kept": {[]string{"1.1 a", "1.1 b"}, 10, []string{"1.1 a", "1.1 b"}},
		"the value that passes the limit is cut":    {[]string{"1.1 a", "1.1 bbbbb"}, 10, []string{"1.1 a", "1.1 b"}},
		"values past the limit are dropped":         {[]string{"aaaaa", "bbbbb", "c", "d"}, 10, []string{"aaaaa", "bbbbb"}},
		"an invalid value is replaced":              {[]string{"ok", "evil\xff"}, 256, []string{"ok", "evil\uFFFD"}},
		"ten thousand values are 256 bytes":         {slices.Repeat([]string{"1.1 x"}, 10000), 256, append(slices.Repeat([]string{"1.1 x"}, 51), "1")},
		"no values":                                 {nil, 256, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := attrvalue.Values(tc.in, tc.limit)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Values = %.80q, want %.80q", got, tc.want)
			}
		})
	}
}

func TestLimitFromEnv(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    int
		wantErr string
	}{
		"unset: 256 bytes":                  {want: 256},
		"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": {env: map[string]string{attrvalue.EnvLimit: "1024"}, want: 1024},
		"the span variable wins":            {env: map[string]string{attrvalue.EnvLimit: "1024", attrvalue.EnvSpanLimit: "64"}, want: 64},
		"not a number is refused, named":    {env: map[string]string{attrvalue.EnvLimit: "big"}, wantErr: `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: "big" must be a positive integer (bytes)`},
		"zero is refused":                   {env: map[string]string{attrvalue.EnvSpanLimit: "0"}, wantErr: `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: "0" must be a positive integer (bytes)`},
		"a negative value (unlimited) too":  {env: map[string]string{attrvalue.EnvLimit: "-1"}, wantErr: `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: "-1" must be a positive integer (bytes)`},
		"blanks around the number are fine": {env: map[string]string{attrvalue.EnvLimit: " 512 "}, want: 512},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := attrvalue.LimitFromEnv(func(k string) string { return tc.env[k] }, 256)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("LimitFromEnv = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// Whatever the bytes: the result is valid UTF-8, within the limit, and, when
// the input was valid, a prefix of it that ends between two characters.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"evil\xff", "x" + strings.Repeat("é", 20), "ab😀😀", "abc\xe2\x82", "\xff\xfe", ""} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit <= 0 || limit > 1<<16 {
			return
		}
		got := attrvalue.Clean(s, limit)
		if !utf8.ValidString(got) || len(got) > limit {
			t.Fatalf("Clean(%q, %d) = %q: invalid or %d bytes", s, limit, got, len(got))
		}
		if utf8.ValidString(s) {
			if !strings.HasPrefix(s, got) || (len(got) < len(s) && !utf8.RuneStart(s[len(got)])) {
				t.Fatalf("Clean(%q, %d) = %q: not a prefix ending between characters", s, limit, got)
			}
			if len(s) > limit && len(got) <= limit-utf8.UTFMax {
				t.Fatalf("Clean(%q, %d) = %q: cut %d bytes short", s, limit, got, limit-len(got))
			}
		}
	})
}
