// Package grpcraw lets the end-to-end programs speak gRPC without generated
// code: the flaky upstream serves any method and the demo app calls one by
// name, each message being the bytes as they are. What the suite checks is
// which calls reach the upstream and what status comes back, never the
// messages' contents.
package grpcraw

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
)

// Codec sends a *[]byte as the message, unchanged. Force it on both sides
// (grpc.ForceServerCodecV2, grpc.ForceCodecV2).
type Codec struct{}

// Marshal returns the bytes v points to.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("grpcraw: cannot marshal %T, want *[]byte", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

// Unmarshal copies the message into the []byte v points to.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("grpcraw: cannot unmarshal into %T, want *[]byte", v)
	}
	*b = data.Materialize()
	return nil
}

// Name is the content subtype: application/grpc+raw.
func (Codec) Name() string { return "raw" }

// Step is one scripted answer of the flaky upstream: a status, answered in a
// Trailers-Only response or after the response headers, with or without a
// grpc-retry-pushback-ms trailer.
type Step struct {
	Code         codes.Code
	AfterHeaders bool
	Pushback     string // the trailer's value as sent; "" for none
}

// ParseSteps reads a comma-separated script such as
// "UNAVAILABLE,UNAVAILABLE after-headers,RESOURCE_EXHAUSTED pushback=800,OK":
// the arrival n of one request id gets step n, the last one repeating.
func ParseSteps(script string) ([]Step, error) {
	var steps []Step
	for tok := range strings.SplitSeq(script, ",") {
		fields := strings.Fields(tok)
		if len(fields) == 0 {
			return nil, fmt.Errorf("empty step in %q", script)
		}
		var st Step
		if err := st.Code.UnmarshalJSON([]byte(strconv.Quote(fields[0]))); err != nil {
			return nil, fmt.Errorf("step %q: %q is not a gRPC status name such as UNAVAILABLE", tok, fields[0])
		}
		for _, f := range fields[1:] {
			switch v, ok := strings.CutPrefix(f, "pushback="); {
			case f == "after-headers":
				st.AfterHeaders = true
			case ok:
				st.Pushback = v
			default:
				return nil, fmt.Errorf("step %q: %q is neither after-headers nor pushback=MS", tok, f)
			}
		}
		steps = append(steps, st)
	}
	return steps, nil
}
