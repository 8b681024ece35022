// Package attrvalue bounds the values a span takes from the network: valid
// UTF-8, cut to a limit in bytes without splitting a character, in memory of
// their own (docs/observability.md#bounded-values). pkg/retryotel sets them
// as they are taken, internal/sidecar/tracing checks them again before export.
package attrvalue

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The environment variables of the attribute value limit, the first set
// winning, as the OpenTelemetry SDK reads them.
const (
	EnvSpanLimit = "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"
	EnvLimit     = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
)

// LimitFromEnv is the attribute value limit the environment (getenv,
// os.Getenv) asks for: OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, else
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, else def (retryotel.DefaultValueLimit:
// a peer never decides how much memory a span holds). A value that is not a
// positive integer is an error naming the variable.
func LimitFromEnv(getenv func(string) string, def int) (int, error) {
	for _, name := range [...]string{EnvSpanLimit, EnvLimit} {
		s := strings.TrimSpace(getenv(name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s: %q must be a positive integer (bytes)", name, s)
		}
		return n, nil
	}
	return def, nil
}

// Clean is s as valid UTF-8 (each run of invalid bytes replaced by U+FFFD)
// cut to at most limit bytes, never inside a character. It allocates only
// when s changes, and reads at most limit bytes of a longer s; a cut s is a
// copy, so a span never keeps a long header value alive.
//
//	Clean("evil\xff", 256)      = "evil\uFFFD"
//	Clean("x"+"é"×300, 256)     = "x"+"é"×127 (255 bytes: the 128th é would end at byte 257)
//	Clean("GET", 256)           = "GET" (the same string)
func Clean(s string, limit int) string {
	if len(s) <= limit && utf8.ValidString(s) {
		return s
	}
	if len(s) > limit {
		s = s[:cutPoint(s, limit)]
		if utf8.ValidString(s) {
			return strings.Clone(s)
		}
	}
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	if len(s) > limit { // each replaced byte may have grown to three
		s = s[:cutPoint(s, limit)]
	}
	return s
}

// cutPoint is where to cut s (longer than limit) to at most limit bytes:
// limit, or the start of the character that byte limit is inside of.
func cutPoint(s string, limit int) int {
	for i := limit; i >= 0 && i > limit-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return limit
}

// Values is the values of a header cleaned as one attribute: each value
// Clean, and the values together at most limit bytes (those past the limit
// dropped, the one that crosses it cut). It returns vs itself, without
// allocating, when nothing changes.
func Values(vs []string, limit int) []string {
	total := 0
	for i, v := range vs {
		total += len(v)
		if total > limit || !utf8.ValidString(v) {
			return cleanFrom(vs, i, limit)
		}
	}
	return vs
}

// cleanFrom is Values of vs whose values before i need no change.
func cleanFrom(vs []string, i, limit int) []string {
	out := append(make([]string, 0, i+1), vs[:i]...)
	left := limit
	for _, v := range vs[:i] {
		left -= len(v)
	}
	for _, v := range vs[i:] {
		if left <= 0 {
			break
		}
		v = Clean(v, left)
		out = append(out, v)
		left -= len(v)
	}
	return out
}
