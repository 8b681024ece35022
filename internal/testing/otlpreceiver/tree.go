package otlpreceiver

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Tree renders the spans of one trace as a tree, children in start order,
// times relative to the trace's first span:
//
//	trace 4bf92f3577b34da6a3ce929d0e0e4736
//	└─ GET SERVER retry-sidecar  +0ms 1.236s  retry.outcome=success retry.attempts=3 …
//	   ├─ GET CLIENT  +1ms 2ms  http.response.status_code=503 …
//	   │  · retry.wait +3ms retry.delay=0.1 retry.reason=backoff
//	   …
//
// A span whose parent is not among spans (the app's) is a root.
func Tree(spans []Span) string {
	if len(spans) == 0 {
		return ""
	}
	byID := map[string]bool{}
	children := map[string][]Span{}
	var roots []Span
	t0 := spans[0].GetStartTimeUnixNano()
	for _, s := range spans {
		byID[string(s.GetSpanId())] = true
		t0 = min(t0, s.GetStartTimeUnixNano())
	}
	for _, s := range spans {
		if p := string(s.GetParentSpanId()); p != "" && byID[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s\n", hex.EncodeToString(spans[0].GetTraceId()))
	var walk func(s Span, prefix string, last bool)
	walk = func(s Span, prefix string, last bool) {
		branch, next := "├─ ", "│  "
		if last {
			branch, next = "└─ ", "   "
		}
		fmt.Fprintf(&b, "%s%s%s %s", prefix, branch, s.GetName(), kindName(s.GetKind()))
		if s.Service != "" && (s.GetKind() == tracepb.Span_SPAN_KIND_SERVER || s.GetParentSpanId() == nil) {
			b.WriteString(" " + s.Service)
		}
		fmt.Fprintf(&b, "  %s %s  %s\n", offset(t0, s.GetStartTimeUnixNano()),
			time.Duration(s.GetEndTimeUnixNano()-s.GetStartTimeUnixNano()).Round(time.Millisecond), attrs(s.GetAttributes()))
		for _, e := range s.GetEvents() {
			fmt.Fprintf(&b, "%s%s· %s %s  %s\n", prefix, next, e.GetName(), offset(t0, e.GetTimeUnixNano()), attrs(e.GetAttributes()))
		}
		kids := children[string(s.GetSpanId())]
		sortByStart(kids)
		for i, k := range kids {
			walk(k, prefix+next, i == len(kids)-1)
		}
	}
	sortByStart(roots)
	for i, r := range roots {
		walk(r, "", i == len(roots)-1)
	}
	return b.String()
}

func sortByStart(spans []Span) {
	slices.SortStableFunc(spans, func(a, b Span) int {
		if c := int64(a.GetStartTimeUnixNano()) - int64(b.GetStartTimeUnixNano()); c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.GetSpanId(), b.GetSpanId())
	})
}

func offset(t0, t uint64) string {
	return "+" + time.Duration(t-t0).Round(time.Millisecond).String()
}

func kindName(k tracepb.Span_SpanKind) string {
	return strings.TrimPrefix(k.String(), "SPAN_KIND_")
}

// attrs renders key=value pairs in key order.
func attrs(kvs []*commonpb.KeyValue) string {
	parts := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		parts = append(parts, kv.GetKey()+"="+Value(kv.GetValue()))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// Value renders an attribute value: strings quoted only when they hold a space.
func Value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		if strings.ContainsAny(x.StringValue, " \t") {
			return strconv.Quote(x.StringValue)
		}
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'f', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		vals := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			vals = append(vals, Value(e))
		}
		return "[" + strings.Join(vals, ",") + "]"
	}
	return v.String()
}
