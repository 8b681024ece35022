package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The bytes an ended span holds beside its strings, as measured on the
// sidecar's spans (an ended SERVER or CLIENT span with 5 or 6 attributes
// holds about 800 bytes of heap, of which the attribute slots are 64 each).
const (
	spanOverhead  = 384 // the span: ids, times, kind, status, slices
	attrOverhead  = 64  // an attribute.KeyValue
	eventOverhead = 96  // an sdktrace.Event or Link
)

// spanSize estimates the bytes s holds while it waits for export: a constant
// per span, attribute, event and link, plus the length of every string, so a
// span carrying a long value weighs what it holds. It reads no more than the
// span's own fields.
func spanSize(s sdktrace.ReadOnlySpan) int {
	n := spanOverhead + len(s.Name()) + len(s.Status().Description) + traceStateSize(s.SpanContext().TraceState())
	n += attrsSize(s.Attributes())
	for _, e := range s.Events() {
		n += eventOverhead + len(e.Name) + attrsSize(e.Attributes)
	}
	for _, l := range s.Links() {
		n += eventOverhead + attrsSize(l.Attributes) + traceStateSize(l.SpanContext.TraceState())
	}
	return n
}

func attrsSize(kvs []attribute.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		n += attrOverhead + len(kv.Key) + valueSize(kv.Value)
	}
	return n
}

// valueSize is the bytes of v's strings and elements (a number is within the
// attribute's slot).
func valueSize(v attribute.Value) int {
	switch v.Type() {
	case attribute.STRING, attribute.BYTESLICE:
		return len(v.AsString())
	case attribute.STRINGSLICE:
		n := 0
		for _, s := range v.AsStringSlice() {
			n += 16 + len(s)
		}
		return n
	case attribute.BOOLSLICE:
		return len(v.AsBoolSlice())
	case attribute.INT64SLICE:
		return 8 * len(v.AsInt64Slice())
	case attribute.FLOAT64SLICE:
		return 8 * len(v.AsFloat64Slice())
	case attribute.SLICE:
		n := 0
		for _, e := range v.AsSlice() {
			n += attrOverhead + valueSize(e)
		}
		return n
	case attribute.MAP:
		return attrsSize(v.AsMap())
	}
	return 0
}

func traceStateSize(ts trace.TraceState) int {
	if ts.Len() == 0 {
		return 0
	}
	n := 0
	ts.Walk(func(k, v string) bool {
		n += 32 + len(k) + len(v)
		return true
	})
	return n
}
