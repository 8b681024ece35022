package retrysim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// Response is one scripted upstream answer of Simulate: a status with optional
// headers, or a transport failure.
type Response struct {
	// Status is 100..599, or 0 for a transport failure (Failure).
	Status int
	// Failure is "timeout" (the attempt never gets its response headers: it runs
	// into perTryTimeout or the deadline) or "refused" (the dial is refused: the
	// request provably never left).
	Failure string
	// RetryAfter and Date are header values, sent verbatim ("" = absent), so a
	// malformed Retry-After can be tried too.
	RetryAfter string
	Date       string
	// RateLimitRemaining and RateLimitReset are RateLimit-Remaining and
	// RateLimit-Reset values ("" = absent).
	RateLimitRemaining string
	RateLimitReset     string
	// GRPCStatus is the canonical name of a gRPC call's status (OK,
	// UNAVAILABLE, …; docs/grpc.md), "" for an HTTP answer. Pushback is its
	// grpc-retry-pushback-ms trailer, verbatim ("" = absent), so a negative or
	// malformed one can be tried too.
	GRPCStatus string
	Pushback   string
}

// IsGRPC reports a gRPC call's answer (a status name), not an HTTP one.
func (r Response) IsGRPC() bool { return r.GRPCStatus != "" }

// The transport failures a token may name.
const (
	FailureTimeout = "timeout"
	FailureRefused = "refused"
)

// String is the token that parses back to r.
func (r Response) String() string {
	if r.Failure != "" {
		return r.Failure
	}
	var b strings.Builder
	if r.IsGRPC() {
		b.WriteString(r.GRPCStatus)
	} else {
		b.WriteString(strconv.Itoa(r.Status))
	}
	attr := func(name, v string) {
		if v == "" {
			return
		}
		b.WriteString(" " + name + "=")
		if isBare(v) {
			b.WriteString(v)
		} else {
			b.WriteString(strconv.Quote(v))
		}
	}
	attr("ra", r.RetryAfter)
	attr("date", r.Date)
	attr("ratelimit-remaining", r.RateLimitRemaining)
	attr("ratelimit-reset", r.RateLimitReset)
	attr("pushback", r.Pushback)
	return b.String()
}

// TokenError is a malformed --responses token: its 1-based position, its text
// and what is wrong.
type TokenError struct {
	Position int
	Token    string
	Detail   string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("--responses: token %d %q: %s", e.Position, e.Token, e.Detail)
}

// ParseResponses reads a comma-separated list of response tokens, all of
// HTTP or all of gRPC (one call is one or the other):
//
//	token    = http / grpc
//	http     = status *( " " attr ) / "timeout" / "refused"
//	status   = 3DIGIT, 100..599
//	attr     = ( "ra" / "date" / "ratelimit-remaining" / "ratelimit-reset" ) "=" value
//	grpc     = name [ " pushback=" value ]
//	name     = "OK" / a name of retryOn.grpcStatusCodes (UNAVAILABLE, …; docs/grpc.md)
//	value    = bare / quoted     ; bare: no space, comma or quote; quoted: a Go string
//
// ra and date are the Retry-After and Date header values, verbatim (an
// HTTP-date needs quotes: it has a comma); the ratelimit values are digits;
// pushback is the grpc-retry-pushback-ms trailer, verbatim (-1 or soon show
// how the server asking for no retry is handled).
//
//	429 ra=2, 503, 200
//	503 ra="Sun, 06 Nov 1994 08:49:37 GMT" date="Sun, 06 Nov 1994 08:49:07 GMT", timeout, refused
//	UNAVAILABLE, UNAVAILABLE pushback=800, OK
//
// The first malformed token is reported as a *TokenError, and so is the
// first token whose kind differs from the first token's.
func ParseResponses(s string) ([]Response, error) {
	var out []Response
	for pos, raw := range splitTokens(s) {
		t := strings.TrimSpace(raw)
		r, detail := parseToken(t)
		if detail == "" && pos > 0 && r.IsGRPC() != out[0].IsGRPC() {
			detail = mixedDetail(r)
		}
		if detail != "" {
			return nil, &TokenError{Position: pos + 1, Token: t, Detail: detail}
		}
		out = append(out, r)
	}
	return out, nil
}

// mixedDetail says why r cannot follow answers of the other kind.
func mixedDetail(r Response) string {
	switch {
	case r.IsGRPC():
		return "a gRPC status after HTTP answers; one call is HTTP or gRPC, not both"
	case r.Failure != "":
		return r.Failure + " is not simulated for gRPC calls; give a status name such as UNAVAILABLE or DEADLINE_EXCEEDED"
	}
	return "an HTTP status after gRPC answers; one call is HTTP or gRPC, not both"
}

// splitTokens splits at commas outside double quotes.
func splitTokens(s string) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

const wantFirst = "want a status 100..599, a gRPC status name (UNAVAILABLE, OK, …), timeout or refused first"

func parseToken(t string) (Response, string) {
	if t == "" {
		return Response{}, "empty token; want a status such as 503 or UNAVAILABLE, timeout or refused"
	}
	head, rest := cut(t)
	switch {
	case head == FailureTimeout, head == FailureRefused:
		if rest != "" {
			return Response{}, head + " takes no attributes"
		}
		return Response{Failure: head}, ""
	case isGRPCStatusName(head):
		return parseGRPCToken(head, rest)
	case isGRPCStatusName(strings.ToUpper(head)):
		return Response{}, "gRPC status names are upper case: " + strings.ToUpper(head)
	}
	code, err := strconv.Atoi(head)
	if err != nil || len(head) != 3 || code < 100 || code > 599 {
		return Response{}, wantFirst
	}
	r := Response{Status: code}
	detail := readAttrs(rest, func(name, value string) string {
		switch name {
		case "ra":
			r.RetryAfter = value
		case "date":
			r.Date = value
		case "ratelimit-remaining", "ratelimit-reset":
			if value == "" || strings.Trim(value, "0123456789") != "" {
				return name + " must be digits (got " + strconv.Quote(value) + ")"
			}
			if name == "ratelimit-remaining" {
				r.RateLimitRemaining = value
			} else {
				r.RateLimitReset = value
			}
		default:
			return "unknown attribute " + strconv.Quote(name) + "; want ra, date, ratelimit-remaining or ratelimit-reset"
		}
		return ""
	})
	return r, detail
}

// parseGRPCToken reads the attributes of a gRPC status name: only pushback.
func parseGRPCToken(name, rest string) (Response, string) {
	r := Response{GRPCStatus: name}
	detail := readAttrs(rest, func(attr, value string) string {
		if attr != "pushback" {
			return "unknown attribute " + strconv.Quote(attr) + " of a gRPC status; want pushback (grpc-retry-pushback-ms)"
		}
		r.Pushback = value
		return ""
	})
	return r, detail
}

// isGRPCStatusName reports a canonical gRPC status name: OK or one that
// retryOn.grpcStatusCodes may list.
func isGRPCStatusName(s string) bool {
	_, ok := v1alpha1.GRPCStatusCode(s).Number()
	return ok || s == "OK"
}

// readAttrs reads name=value attributes from rest and gives each to set,
// which returns what is wrong with it, if anything.
func readAttrs(rest string, set func(name, value string) string) string {
	seen := map[string]bool{}
	for rest != "" {
		name, value, remaining, detail := cutAttr(rest)
		if detail != "" {
			return detail
		}
		rest = remaining
		if hasControl(value) {
			return name + ": a header value cannot hold control characters"
		}
		if seen[name] {
			return "attribute " + name + " given twice"
		}
		seen[name] = true
		if detail := set(name, value); detail != "" {
			return detail
		}
		if value == "" {
			return name + " needs a value"
		}
	}
	return ""
}

// cut splits off the first space-separated word.
func cut(s string) (head, rest string) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], strings.TrimSpace(s[i:])
	}
	return s, ""
}

// cutAttr reads name=value from the front of s.
func cutAttr(s string) (name, value, rest, detail string) {
	eq := strings.IndexByte(s, '=')
	sp := strings.IndexAny(s, " \t")
	if eq < 0 || (sp >= 0 && sp < eq) {
		w, _ := cut(s)
		return "", "", "", "want name=value after the status (got " + strconv.Quote(w) + ")"
	}
	name = s[:eq]
	s = s[eq+1:]
	if strings.HasPrefix(s, `"`) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return "", "", "", name + ": unterminated quoted value"
		}
		v, _ := strconv.Unquote(q)
		rest = s[len(q):]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			return "", "", "", name + ": want a space after the quoted value"
		}
		return name, v, strings.TrimSpace(rest), ""
	}
	value, rest = cut(s)
	if strings.ContainsRune(value, '"') {
		return "", "", "", name + ": a value with a quote must be quoted as a whole"
	}
	return name, value, rest, ""
}

// isBare: printable ASCII without blank, comma, quote or backslash.
func isBare(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f || c == ',' || c == '"' || c == '\\' {
			return false
		}
	}
	return v != ""
}

// hasControl reports bytes a header value may not carry.
func hasControl(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return true
		}
	}
	return false
}
