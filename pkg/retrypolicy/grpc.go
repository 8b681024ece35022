package retrypolicy

import (
	"math"
	"strings"
	"time"
)

// gRPC calls are decided by the same DecideAt as HTTP requests
// (docs/grpc.md): an Attempt with GRPC set carries the call's grpc-status, its
// grpc-retry-pushback-ms as the Hint (or NoRetry), and the call's deadline
// (the earlier of the policy's and the one grpc-timeout gives) as Deadline.

// MaxGRPCStatus is the largest status code gRPC defines (UNAUTHENTICATED);
// Config.RetryOnGRPCStatus holds codes 1 to MaxGRPCStatus. The codes' names
// are the API's (docs/grpc.md).
const MaxGRPCStatus = 16

// The rejections of ParseGRPCTimeout and ParseGRPCPushback: shared values,
// so a rejection does not allocate.
var (
	errTimeoutEmpty    = &ParseError{Header: "grpc-timeout", Reason: "empty"}
	errTimeoutDigits   = &ParseError{Header: "grpc-timeout", Reason: "not-1-to-8-digits"} // "S", "123456789S", "+1S", " 1S"
	errTimeoutUnit     = &ParseError{Header: "grpc-timeout", Reason: "bad-unit"}          // "1", "1s", "1ms"
	errPushbackEmpty   = &ParseError{Header: "grpc-retry-pushback-ms", Reason: "empty"}
	errPushbackNeg     = &ParseError{Header: "grpc-retry-pushback-ms", Reason: "negative"}       // "-1": the server asks for no retry
	errPushbackInteger = &ParseError{Header: "grpc-retry-pushback-ms", Reason: "not-an-integer"} // "+5", "1.5", " 5", "1e3"
)

// ParseGRPCTimeout parses a grpc-timeout value as gRPC's HTTP/2 protocol
// defines it: 1 to 8 ASCII digits and one unit, H (hours), M (minutes),
// S (seconds), m (milliseconds), u (microseconds) or n (nanoseconds), nothing
// around them. It does not allocate.
//
//	"1S" → 1s        "250m" → 250ms      "0n" → 0 (no time at all)
//	"99999999H" → MaxDelay (saturated: longer than any deadline)
//	"" → empty       "S", "123456789S", "+1S", " 1S" → not-1-to-8-digits
//	"1", "1s", "1ms" → bad-unit
func ParseGRPCTimeout(v string) (time.Duration, error) {
	if v == "" {
		return 0, errTimeoutEmpty
	}
	unit := timeoutUnit(v[len(v)-1])
	if unit == 0 {
		return 0, errTimeoutUnit
	}
	digits := v[:len(v)-1]
	if len(digits) > 8 || !allDigits(digits) {
		return 0, errTimeoutDigits
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		n = n*10 + int64(digits[i]-'0')
	}
	if n > math.MaxInt64/int64(unit) {
		return MaxDelay, nil
	}
	return time.Duration(n) * unit, nil
}

// timeoutUnit is the duration of a grpc-timeout unit, 0 for none.
func timeoutUnit(c byte) time.Duration {
	switch c {
	case 'H':
		return time.Hour
	case 'M':
		return time.Minute
	case 'S':
		return time.Second
	case 'm':
		return time.Millisecond
	case 'u':
		return time.Microsecond
	case 'n':
		return time.Nanosecond
	}
	return 0
}

// ParseGRPCPushback parses grpc-retry-pushback-ms, the server's wait before a
// retry in milliseconds: ASCII digits, nothing around them. A negative or
// malformed value is the server asking for no retry at all, so every error
// means Attempt.NoRetry; a valid value is the exact minimum wait (the Hint's
// Delay, never shortened). It does not allocate.
//
//	"0" → 0     "800" → 800ms     "99999999999999999999" → MaxDelay (saturated)
//	"-1" → negative               "" → empty
//	"+5", "1.5", " 5", "5ms" → not-an-integer
func ParseGRPCPushback(v string) (time.Duration, error) {
	if v == "" {
		return 0, errPushbackEmpty
	}
	if v[0] == '-' && len(v) > 1 && allDigits(v[1:]) {
		return 0, errPushbackNeg
	}
	if !allDigits(v) {
		return 0, errPushbackInteger
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if n > (math.MaxInt64/int64(time.Millisecond))/10 {
			return MaxDelay, nil
		}
		n = n*10 + int64(v[i]-'0')
	}
	if n > math.MaxInt64/int64(time.Millisecond) {
		return MaxDelay, nil
	}
	return time.Duration(n) * time.Millisecond, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

// RetriesGRPCStatus reports whether the policy retries gRPC calls that end
// with this grpc-status (Config.RetryOnGRPCStatus); never for 0, OK.
func (p *Policy) RetriesGRPCStatus(code uint32) bool {
	return code >= 1 && code <= MaxGRPCStatus && p.grpcMask&(1<<code) != 0
}

// GRPCMethodReplayable reports whether a gRPC call to path (its :path,
// "/package.Service/Method") may be sent again: Config.ReplayableMethods
// lists it, or lists "/package.Service/*". It does not allocate.
//
//	ReplayableMethods [/shop.v1.Payments/Get, /shop.v1.Catalogue/*]
//	"/shop.v1.Payments/Get"     true
//	"/shop.v1.Payments/Charge"  false
//	"/shop.v1.Catalogue/List"   true
//	"/shop.v1.Catalogue/a/b"    false (not a gRPC method)
//	"/shop.v1.Catalogue/"       false
func (p *Policy) GRPCMethodReplayable(path string) bool {
	for _, m := range p.grpcMethods {
		if service, ok := strings.CutSuffix(m, "*"); ok {
			rest, found := strings.CutPrefix(path, service)
			if found && rest != "" && strings.IndexByte(rest, '/') < 0 {
				return true
			}
		} else if m == path {
			return true
		}
	}
	return false
}
