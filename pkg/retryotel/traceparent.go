package retryotel

import (
	"net/http"
	"unsafe"

	"go.opentelemetry.io/otel/trace"
)

// traceparentLen is the length of a version 00 traceparent:
// 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>.
const traceparentLen = 55

// traceparentHeader holds one traceparent value and the slice of the header
// map that refers to it: one allocation per attempt, where the
// propagation.TraceContext's Inject costs three.
type traceparentHeader struct {
	vals [1]string
	buf  [traceparentLen]byte
}

// setTraceContext sets the W3C trace context of sc in h, as
// propagation.TraceContext's Inject does: traceparent, and tracestate when
// sc has one. Only the flags the W3C specification defines are kept.
func setTraceContext(h http.Header, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	if ts := sc.TraceState(); ts.Len() > 0 {
		h["Tracestate"] = []string{ts.String()}
	}
	tp := new(traceparentHeader)
	b := append(tp.buf[:0], "00-"...)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendHex(b, tid[:])
	b = append(b, '-')
	b = appendHex(b, sid[:])
	b = append(b, '-')
	b = appendHex(b, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	// buf is written once, here, and never again: the string may alias it.
	tp.vals[0] = unsafe.String(&tp.buf[0], len(b))
	h["Traceparent"] = tp.vals[:]
}

func appendHex(b, src []byte) []byte {
	const hex = "0123456789abcdef"
	for _, c := range src {
		b = append(b, hex[c>>4], hex[c&15])
	}
	return b
}
