// Package rules holds the rules an upstream's fields obey, each defined once
// (docs/policy.md#where-the-rules-live): the API's validation (api/v1alpha1),
// the sidecar's reading of a rendered policy (internal/policyset) and
// pkg/retrypolicy's Compile all apply these, so the API server accepts exactly
// what every sidecar compiles. It imports only the standard library, as
// pkg/retrypolicy must.
package rules

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The CRD's schema markers must hold literals; a test of api/v1alpha1 reads
// the generated CRD and requires every marker to equal the value here. Each
// checker returns "" when the value is allowed, else what is allowed (without
// the field path, which the caller knows).

// Bounds of an upstream's fields and lists.
const (
	MinAttempts          = 1
	MaxAttempts          = 10
	MaxMethodTokenLength = 32
	// MaxGRPCMethodPatternLength bounds a gRPC method pattern of
	// replayableMethods ("/package.Service/Method"), the longest entry the
	// list takes.
	MaxGRPCMethodPatternLength = 256
	MaxHeaderNameLength        = 128
	// MaxUpstreams bounds the upstreams of one RetryPolicy.
	MaxUpstreams = 16
	// MaxNameLength bounds an upstream name (a DNS-1123 label).
	MaxNameLength = 63
	// MaxHosts bounds the hosts of one upstream.
	MaxHosts = 32
	// MaxHostPatternLength is the longest hosts entry: a 253-byte DNS name
	// with ":65535", or "*." and a 253-byte suffix, fits.
	MaxHostPatternLength = MaxDNSNameLength + len(":65535") + 2
	// MaxDNSNameLength bounds a DNS-1123 subdomain (a host, tls.hostname, a
	// ConfigMap name).
	MaxDNSNameLength = 253
	// MaxReplayableMethods bounds replayableMethods.
	MaxReplayableMethods = 16
	// MaxDurationLength bounds the text of a duration field.
	MaxDurationLength = 32
)

// Range is the inclusive range of one integer field of an upstream.
type Range struct {
	// Path is the field below spec.upstreams[i], in the API's JSON names.
	Path     string
	Min, Max int64
}

// Problem checks v against the range.
func (r Range) Problem(v int64) string {
	if v < r.Min || v > r.Max {
		return fmt.Sprintf("must be between %d and %d", r.Min, r.Max)
	}
	return ""
}

// The integer fields of an upstream and their ranges.
var (
	AttemptsRange            = Range{"maxAttempts", MinAttempts, MaxAttempts}
	MaxReplayBodyBytesRange  = Range{"maxReplayBodyBytes", 0, 16 << 20}
	RetryPercentRange        = Range{"budget.retryPercent", 0, 100}
	MinRetriesPerSecondRange = Range{"budget.minRetriesPerSecond", 0, 10_000}
	RequestsPerMinuteRange   = Range{"rateLimit.requestsPerMinute", 1, 6_000_000}
	BurstRange               = Range{"rateLimit.burst", 1, 10_000}
	MaxInFlightRange         = Range{"concurrency.maxInFlight", 1, 10_000}
	MaxQueuedRange           = Range{"concurrency.maxQueued", 0, 100_000}
	PortRange                = Range{"tls.port", 1, 65535}
)

// Ranges lists every integer field's range, for the test that pins the CRD's
// minimum and maximum markers to them.
func Ranges() []Range {
	return []Range{AttemptsRange, MaxReplayBodyBytesRange, RetryPercentRange, MinRetriesPerSecondRange,
		RequestsPerMinuteRange, BurstRange, MaxInFlightRange, MaxQueuedRange, PortRange}
}

// retryableStatuses are the statuses retryOn may list; anything else is refused
// because retrying it is either pointless (4xx) or unsafe to assume.
var retryableStatuses = [...]int{408, 425, 429, 500, 502, 503, 504}

// RetryableStatuses returns the statuses retryOn.statusCodes may list, in
// ascending order.
func RetryableStatuses() []int { return append([]int(nil), retryableStatuses[:]...) }

// StatusIndex is the index of code in RetryableStatuses, or -1: a retrying
// executor keeps the retried statuses as one bit each.
func StatusIndex(code int) int {
	for i, s := range retryableStatuses {
		if s == code {
			return i
		}
	}
	return -1
}

// StatusProblem checks one retryOn.statusCodes entry.
func StatusProblem(code int) string {
	if StatusIndex(code) >= 0 {
		return ""
	}
	allowed := make([]string, len(retryableStatuses))
	for i, s := range retryableStatuses {
		allowed[i] = strconv.Itoa(s)
	}
	return "must be one of " + strings.Join(allowed, ", ")
}

// Jitters returns the jitter modes backoff.jitter may name.
func Jitters() []string { return []string{"Full", "Equal", "None"} }

// JitterProblem checks backoff.jitter.
func JitterProblem(j string) string {
	switch j {
	case "Full", "Equal", "None":
		return ""
	}
	return "must be one of Full, Equal, None"
}

// AttemptsProblem checks maxAttempts.
func AttemptsProblem(n int) string {
	if AttemptsRange.Problem(int64(n)) != "" {
		return fmt.Sprintf("must be between %d and %d (transmissions including the first)", MinAttempts, MaxAttempts)
	}
	return ""
}

// NamePattern is the grammar of an upstream name (a DNS-1123 label, at most
// MaxNameLength long); DNSNamePattern that of a DNS-1123 subdomain, whose labels
// are also at most MaxNameLength long and which is at most MaxDNSNameLength long.
const (
	NamePattern    = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DNSNamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
)

// NameProblem checks an upstream name: a DNS-1123 label (NamePattern).
func NameProblem(name string) string {
	if len(name) > MaxNameLength || !isLabel(name) {
		return fmt.Sprintf("must be a DNS-1123 label such as payments-api: 1-%d of a-z, 0-9 and '-', not starting or ending with '-'", MaxNameLength)
	}
	return ""
}

// DNSNameProblem checks a DNS name (DNSNamePattern): tls.hostname.
func DNSNameProblem(s string) string {
	if !isHostName(s) {
		return notHostName
	}
	return ""
}

// GRPCMethodPattern is the grammar of a gRPC method pattern in
// replayableMethods: "/" + the full service name (protobuf identifiers joined
// by ".", the package optional) + "/" + a method name or "*" (every method of
// the service). It has no backslash, so the CRD's CEL rule holds it as written.
const GRPCMethodPattern = `^/([A-Za-z_][A-Za-z0-9_]*[.])*[A-Za-z_][A-Za-z0-9_]*/([A-Za-z_][A-Za-z0-9_]*|[*])$`

var grpcMethodText = regexp.MustCompile(GRPCMethodPattern)

// GRPCMethodProblem is what MethodProblem says of a malformed gRPC method pattern.
const GRPCMethodProblem = "must be a gRPC method pattern, /package.Service/Method or /package.Service/* (protobuf identifiers: letters, digits and '_')"

// IsGRPCMethodPattern reports whether a replayableMethods entry is meant as a
// gRPC method pattern: it starts with '/', which no HTTP method token does.
func IsGRPCMethodPattern(m string) bool { return strings.HasPrefix(m, "/") }

// MethodProblem checks one replayableMethods entry: an HTTP method token, or a
// gRPC method pattern (GRPCMethodPattern). forbidden reports that m is a
// well-formed method that may never be replayed by method (POST, PATCH).
func MethodProblem(m string) (problem string, forbidden bool) {
	switch {
	case IsGRPCMethodPattern(m):
		if len(m) > MaxGRPCMethodPatternLength {
			return fmt.Sprintf("%s, at most %d bytes", GRPCMethodProblem, MaxGRPCMethodPatternLength), false
		}
		if !grpcMethodText.MatchString(m) {
			return GRPCMethodProblem, false
		}
		return "", false
	case len(m) > MaxMethodTokenLength || !IsToken(m):
		return "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE, or a gRPC method pattern such as /package.Service/Method", false
	case m != strings.ToUpper(m):
		return fmt.Sprintf("must be upper-case (%s); methods are case-sensitive", strings.ToUpper(m)), false
	case m == "POST" || m == "PATCH":
		return "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true
	}
	return "", false
}

// HeaderNameProblem checks idempotencyKey.header (non-empty).
func HeaderNameProblem(h string) string {
	if len(h) > MaxHeaderNameLength || !IsToken(h) {
		return "must be an HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~), such as Idempotency-Key"
	}
	return ""
}

// durationText is the grammar of a duration field: Go duration units without
// a sign and without "µs".
var durationText = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`)

// DurationPattern is the grammar of a duration field's text (the CRD's pattern).
func DurationPattern() string { return durationText.String() }

// DurationProblem is a duration message: what every duration field allows.
const DurationProblem = "must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h)"

// ParseDuration parses the text of a duration field: at most
// MaxDurationLength bytes of DurationPattern, strictly positive, within
// time.Duration's range. The problem is "" when s is allowed.
func ParseDuration(s string) (d time.Duration, problem string) {
	if len(s) > MaxDurationLength || !durationText.MatchString(s) {
		return 0, DurationProblem
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, DurationProblem
	}
	return d, ""
}

// PerTryTimeoutProblem checks perTryTimeout against deadline (both > 0).
func PerTryTimeoutProblem(perTry, deadline time.Duration) string {
	if perTry >= deadline {
		return fmt.Sprintf("must be < deadline (%s)", deadline)
	}
	return ""
}

// ConnectTimeoutProblem checks connectTimeout against deadline (both > 0).
func ConnectTimeoutProblem(connect, deadline time.Duration) string {
	if connect > deadline {
		return fmt.Sprintf("must be <= deadline (%s)", deadline)
	}
	return ""
}

// BackoffMaxProblem checks backoff.max against backoff.base (both > 0).
func BackoffMaxProblem(base, maxDelay time.Duration) string {
	if maxDelay < base {
		return fmt.Sprintf("must be >= backoff.base (%s)", base)
	}
	return ""
}

// HoldOnDeferralProblem checks pacing.holdOnDeferral (when true) against the
// attempts and the number of retried statuses.
func HoldOnDeferralProblem(maxAttempts, retriedStatuses int) string {
	if maxAttempts <= 1 || retriedStatuses == 0 {
		return "needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred"
	}
	return ""
}

// IsToken reports whether s is an RFC 9110 token (method names, header names).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// HostPatternProblem is the one grammar of a hosts entry, shared by the API's
// validation and Compile: "" when h is valid, else what is wrong with it.
// Accepted forms, always lower-case:
//
//	payments.shop.svc          any port
//	api.partner.example:8443   that port only
//	10.0.0.7, [fd00::7]:8080   IP literals, with or without a port
//	*.partner.example          any subdomain of partner.example (not partner.example itself), any port
func HostPatternProblem(h string) string {
	if h == "" {
		return "empty"
	}
	if len(h) > MaxHostPatternLength {
		return fmt.Sprintf("longer than %d bytes", MaxHostPatternLength)
	}
	if h != strings.ToLower(h) {
		return "must be lower-case (" + strings.ToLower(h) + ")"
	}
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		if strings.ContainsAny(suffix, "*:[]") {
			return `a wildcard is only allowed as the whole first label ("*.suffix") and takes no port`
		}
		if !isHostName(suffix) {
			return "suffix " + notHostName
		}
		return ""
	}
	if strings.Contains(h, "*") {
		return `a wildcard is only allowed as the whole first label ("*.suffix")`
	}
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "unterminated IPv6 literal"
		}
		host = h[1:end]
		if rest := h[end+1:]; rest != "" {
			if rest[0] != ':' {
				return "only a port may follow an IPv6 literal"
			}
			if port = rest[1:]; port == "" {
				return "empty port"
			}
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
			return "invalid IPv6 literal (zones are not allowed)"
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
		if port == "" {
			return "empty port"
		}
		if strings.IndexByte(host, ':') >= 0 {
			return "IPv6 literals need brackets, as in [fd00::7]:8080"
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || PortRange.Problem(int64(n)) != "" || port[0] == '0' || port[0] == '+' {
			return fmt.Sprintf("port must be a number between %d and %d", PortRange.Min, PortRange.Max)
		}
	}
	if h[0] == '[' {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !isHostName(host) {
		return "host " + notHostName
	}
	return ""
}

const notHostName = "must be a DNS-1123 subdomain: labels of a-z, 0-9 and '-' (1-63 long, not starting or ending with '-'), separated by '.'"

// isHostName: lower-case letters, digits, '-' and '.', labels non-empty, no
// leading or trailing dot.
func isHostName(s string) bool {
	if s == "" || len(s) > MaxDNSNameLength {
		return false
	}
	// DNS-1123 subdomain, as the API validates it: labels of [a-z0-9-], 1..63
	// long, not starting or ending with '-'.
	for label := range strings.SplitSeq(s, ".") {
		if !isLabel(label) {
			return false
		}
	}
	return true
}

// isLabel: a DNS-1123 label, 1..63 of [a-z0-9-], not starting or ending with '-'.
func isLabel(label string) bool {
	if label == "" || len(label) > MaxNameLength || label[0] == '-' || label[len(label)-1] == '-' {
		return false
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
