package tracing

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Sampler decides which requests the sidecar records, as the OpenTelemetry
// SDK's sampler of the same OTEL_TRACES_SAMPLER would, but before anything is
// allocated: an unsampled request costs a header lookup and this decision.
//
//	OTEL_TRACES_SAMPLER        no parent          sampled parent   unsampled parent
//	always_on                  record             record           record
//	always_off                 drop               drop             drop
//	traceidratio (r)           ratio r            ratio r of its trace id
//	parentbased_always_on      record             record           drop
//	parentbased_always_off     drop               record           drop
//	parentbased_traceidratio   ratio r            record           drop
//
// Unset means parentbased_always_on (the SDK's default); the argument of the
// ratio samplers is OTEL_TRACES_SAMPLER_ARG, 1 when unset.
type Sampler struct {
	parentBased bool
	// bound: a trace id whose last 8 bytes, shifted right once, are below it
	// is sampled (the SDK's TraceIDRatioBased); 0 never, 1<<63 always.
	bound uint64
}

// The values of OTEL_TRACES_SAMPLER.
var samplerNames = []string{"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// ParseSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
func ParseSampler(name, arg string) (Sampler, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		name = "parentbased_always_on"
	}
	s := Sampler{parentBased: strings.HasPrefix(name, "parentbased_"), bound: 1 << 63}
	switch strings.TrimPrefix(name, "parentbased_") {
	case "always_on":
	case "always_off":
		s.bound = 0
	case "traceidratio":
		ratio := 1.0
		if a := strings.TrimSpace(arg); a != "" {
			r, err := strconv.ParseFloat(a, 64)
			if err != nil || r < 0 || r > 1 {
				return s, fmt.Errorf("%s: %q must be a number from 0 to 1", EnvSamplerArg, a)
			}
			ratio = r
		}
		s.bound = ratioBound(ratio)
	default:
		return s, fmt.Errorf("%s: %q is not supported: use one of %s", EnvSampler, name, strings.Join(samplerNames, ", "))
	}
	if name == "traceidratio" || name == "always_on" || name == "always_off" {
		s.parentBased = false
	}
	return s, nil
}

// ratioBound is the SDK's TraceIDRatioBased bound of ratio.
func ratioBound(ratio float64) uint64 {
	if ratio >= 1 {
		return 1 << 63
	}
	return uint64(ratio * (1 << 63))
}

// Sample says whether a request whose parent is parent (invalid: none) is
// recorded. It does not allocate.
func (s Sampler) Sample(parent trace.SpanContext) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	if s.bound >= 1<<63 {
		return true
	}
	if s.bound == 0 {
		return false
	}
	var x uint64
	if parent.IsValid() {
		id := parent.TraceID()
		x = binary.BigEndian.Uint64(id[8:16]) >> 1
	} else {
		x = rand.Uint64() >> 1
	}
	return x < s.bound
}

// ParseTraceparent reads a W3C traceparent header (version 00, or a later
// version's first four fields): the app's span, the parent of the sidecar's.
// It returns an invalid SpanContext for anything else. It does not allocate.
//
//	00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
func ParseTraceparent(v string) trace.SpanContext {
	const n = 55 // version 00: exactly this long
	var version, flags [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	if len(v) < n || v[2] != '-' || v[35] != '-' || v[52] != '-' ||
		!hexDecode(version[:], v[:2]) || version[0] == 0xff ||
		(version[0] == 0 && len(v) != n) || (len(v) > n && v[n] != '-') ||
		!hexDecode(tid[:], v[3:35]) || !hexDecode(sid[:], v[36:52]) || !hexDecode(flags[:], v[53:55]) {
		return trace.SpanContext{}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// hexDecode decodes lower-case hex s into dst (len(s) == 2·len(dst)).
func hexDecode(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
