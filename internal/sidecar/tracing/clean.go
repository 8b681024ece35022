package tracing

import (
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// cleanBatch replaces, in place, each span of batch that holds a string that
// is not valid UTF-8 (which OTLP's protobuf encoding refuses, failing the
// whole batch) by a copy with every invalid run replaced by U+FFFD. The
// spans' values were cleaned as they were set (attrvalue.Clean); this is the
// last line, so that one span that slipped through never costs the others.
func cleanBatch(batch []sdktrace.ReadOnlySpan) {
	for i, s := range batch {
		if !spanValid(s) {
			batch[i] = newCleanSpan(s)
		}
	}
}

func spanValid(s sdktrace.ReadOnlySpan) bool {
	if !utf8.ValidString(s.Name()) || !utf8.ValidString(s.Status().Description) || !attrsValid(s.Attributes()) {
		return false
	}
	for _, e := range s.Events() {
		if !utf8.ValidString(e.Name) || !attrsValid(e.Attributes) {
			return false
		}
	}
	for _, l := range s.Links() {
		if !attrsValid(l.Attributes) {
			return false
		}
	}
	return true
}

func attrsValid(kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if !utf8.ValidString(string(kv.Key)) || !valueValid(kv.Value) {
			return false
		}
	}
	return true
}

func valueValid(v attribute.Value) bool {
	switch v.Type() {
	case attribute.STRING:
		return utf8.ValidString(v.AsString())
	case attribute.STRINGSLICE:
		for _, s := range v.AsStringSlice() {
			if !utf8.ValidString(s) {
				return false
			}
		}
	case attribute.SLICE:
		for _, e := range v.AsSlice() {
			if !valueValid(e) {
				return false
			}
		}
	case attribute.MAP:
		return attrsValid(v.AsMap())
	}
	return true // numbers, and bytes (protobuf bytes need not be UTF-8)
}

// cleanSpan is a span whose strings were made valid UTF-8; everything else
// is the original's.
type cleanSpan struct {
	sdktrace.ReadOnlySpan
	name   string
	status sdktrace.Status
	attrs  []attribute.KeyValue
	events []sdktrace.Event
	links  []sdktrace.Link
}

func newCleanSpan(s sdktrace.ReadOnlySpan) *cleanSpan {
	c := &cleanSpan{ReadOnlySpan: s, name: validUTF8(s.Name()), status: s.Status(), attrs: cleanAttrs(s.Attributes())}
	c.status.Description = validUTF8(c.status.Description)
	for _, e := range s.Events() {
		e.Name, e.Attributes = validUTF8(e.Name), cleanAttrs(e.Attributes)
		c.events = append(c.events, e)
	}
	for _, l := range s.Links() {
		l.Attributes = cleanAttrs(l.Attributes)
		c.links = append(c.links, l)
	}
	return c
}

func (c *cleanSpan) Name() string                     { return c.name }
func (c *cleanSpan) Status() sdktrace.Status          { return c.status }
func (c *cleanSpan) Attributes() []attribute.KeyValue { return c.attrs }
func (c *cleanSpan) Events() []sdktrace.Event         { return c.events }
func (c *cleanSpan) Links() []sdktrace.Link           { return c.links }

func cleanAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	if kvs == nil {
		return nil
	}
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = attribute.KeyValue{Key: attribute.Key(validUTF8(string(kv.Key))), Value: cleanValue(kv.Value)}
	}
	return out
}

func cleanValue(v attribute.Value) attribute.Value {
	switch v.Type() {
	case attribute.STRING:
		return attribute.StringValue(validUTF8(v.AsString()))
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice() // a copy
		for i, s := range ss {
			ss[i] = validUTF8(s)
		}
		return attribute.StringSliceValue(ss)
	case attribute.SLICE:
		vs := v.AsSlice() // a copy
		for i, e := range vs {
			vs[i] = cleanValue(e)
		}
		return attribute.SliceValue(vs...)
	case attribute.MAP:
		return attribute.MapValue(cleanAttrs(v.AsMap())...)
	}
	return v
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, string(utf8.RuneError)) }
