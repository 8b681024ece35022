package sidecar

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// BenchmarkHeldAnswer is what holding a unary answer until its trailers
// costs per call (docs/performance.md#grpc): the hold alone, and the answer
// held then relayed to the app, beside the same answer streamed through
// without a hold. The answer is a health check's: one 7-byte message, then
// grpc-status and grpc-message in the trailers.
func BenchmarkHeldAnswer(b *testing.B) {
	g := &grpcForwarder{log: slog.New(slog.DiscardHandler)}
	r := (&http.Request{Header: http.Header{}}).WithContext(context.Background())
	body := &rewinder{data: []byte{0, 0, 0, 0, 2, 8, 1}}
	resp := &http.Response{StatusCode: http.StatusOK, Body: body,
		Header:  http.Header{"Content-Type": {"application/grpc"}},
		Trailer: http.Header{"Grpc-Status": {"0"}, "Grpc-Message": {""}}}
	shares := newHoldShares(grpcConnHoldBytes)
	call := &grpcCall{} // its held answer serves every attempt
	w := &discardWriter{h: http.Header{}}
	outcome := func(*http.Response) retrypolicy.Outcome { return retrypolicy.OutcomeSuccess }
	for _, c := range []struct {
		name string
		call func()
	}{
		{"hold only", func() { holdBackInto(&call.held, resp, true, shares, "app").close() }},
		{"held and relayed", func() { // grpcForwarder.attempt, then finish
			h := holdBackInto(&call.held, resp, true, shares, "app")
			g.relay(w, r, r.Context(), h, outcome, 1)
			h.close()
		}},
		{"streamed, not held", func() { // grpcForwarder.forward
			g.relay(w, r, r.Context(), &heldAnswer{resp: resp}, outcome, 1)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				body.off = 0
				clear(w.h)
				c.call()
			}
			if w.n == 0 && c.name != "hold only" {
				b.Fatal("nothing was relayed")
			}
		})
	}
}

// discardWriter is an app's side of a stream that takes everything.
type discardWriter struct {
	h http.Header
	n int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkReplayStream is what keeping a unary call's request for replay
// costs per call: the app's 5-byte message read by one attempt.
func BenchmarkReplayStream(b *testing.B) {
	b.ReportAllocs()
	msg := []byte{0, 0, 0, 0, 0}
	for b.Loop() {
		s := newReplayStream(io.NopCloser(bytes.NewReader(msg)), 4<<20, nil)
		if n, err := io.Copy(io.Discard, s.attempt()); n != 5 || err != nil {
			b.Fatalf("the attempt read %d bytes, %v; want 5, nil", n, err)
		}
		s.Close()
	}
}
