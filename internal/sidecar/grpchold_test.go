package sidecar

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

func TestHeldAnswersShareTheirConnectionsBound(t *testing.T) {
	t.Parallel()
	shares := newHoldShares(2 * grpcHoldChunk)
	answer := func(n int) *http.Response {
		return &http.Response{Body: io.NopCloser(bytes.NewReader(make([]byte, n)))}
	}
	small := holdBack(answer(100), true, shares, "a")
	if !small.complete || len(small.data) != 100 || shares.inUse("a") != 100 {
		t.Fatalf("a 100-byte answer: complete %v, %d bytes held, %d taken; want true, 100, 100", small.complete, len(small.data), shares.inUse("a"))
	}
	big := holdBack(answer(grpcHoldBytes), true, shares, "a")
	if big.complete || len(big.data) != grpcHoldChunk {
		t.Errorf("a 64 KiB answer beside it: complete %v, %d bytes held; want false (committed), %d", big.complete, len(big.data), grpcHoldChunk)
	}
	other := holdBack(answer(grpcHoldBytes), true, shares, "b")
	if other.complete || len(other.data) != 2*grpcHoldChunk {
		t.Errorf("another connection's: complete %v, %d bytes held; want false, %d", other.complete, len(other.data), 2*grpcHoldChunk)
	}
	for _, h := range []*heldAnswer{small, big, other} {
		h.close()
	}
	if a, b := shares.inUse("a"), shares.inUse("b"); a != 0 || b != 0 {
		t.Errorf("after close: %d and %d bytes taken; want 0 and 0", a, b)
	}
	whole := holdBack(answer(grpcHoldBytes), true, newHoldShares(grpcConnHoldBytes), "a")
	if !whole.complete || len(whole.data) != grpcHoldBytes {
		t.Errorf("64 KiB alone: complete %v, %d bytes; want true, %d", whole.complete, len(whole.data), grpcHoldBytes)
	}
	whole.close()
}

func TestHoldingAnAnswerAllocatesNoBuffer(t *testing.T) {
	body := &rewinder{data: make([]byte, 10<<10)}
	resp := &http.Response{Body: body}
	shares := newHoldShares(grpcConnHoldBytes)
	// as grpcForwarder.attempt holds: into the call's own heldAnswer
	call := &grpcCall{}
	holdBackInto(&call.held, resp, true, shares, "a").close() // warms the pool
	allocs := testing.AllocsPerRun(100, func() {
		body.off = 0
		holdBackInto(&call.held, resp, true, shares, "a").close()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per held answer; want 0", allocs)
	}
}

type rewinder struct {
	data []byte
	off  int
}

func (r *rewinder) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}
func (*rewinder) Close() error { return nil }

func TestReplayStreamsTakeTheirBytesFromReplayMemory(t *testing.T) {
	t.Parallel()
	mem := retryhttp.NewReplayMemory(100)
	kept := newReplayStream(io.NopCloser(strings.NewReader(strings.Repeat("x", 60))), 1<<10, mem)
	if b, _ := io.ReadAll(kept.attempt()); len(b) != 60 || !kept.rewindable() || mem.InUse() != 60 {
		t.Errorf("60 bytes kept: read %d, rewindable %v, %d reserved; want 60, true, 60", len(b), kept.rewindable(), mem.InUse())
	}
	squeezed := newReplayStream(io.NopCloser(strings.NewReader(strings.Repeat("y", 60))), 1<<10, mem)
	if b, _ := io.ReadAll(squeezed.attempt()); len(b) != 60 || squeezed.rewindable() || mem.InUse() != 60 {
		t.Errorf("60 more over a cap of 100: read %d, rewindable %v, %d reserved; want 60 (sent once), false, 60", len(b), squeezed.rewindable(), mem.InUse())
	}
	kept.Close()
	squeezed.Close()
	if mem.InUse() != 0 {
		t.Errorf("after close %d bytes reserved; want 0", mem.InUse())
	}
}
