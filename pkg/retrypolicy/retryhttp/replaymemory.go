package retryhttp

import (
	"sync/atomic"

	"github.com/retrydev/retry-operator/internal/libhooks"
)

func init() {
	libhooks.TryReserveReplayMemory = func(m any, n int64) bool { return m.(*ReplayMemory).tryReserve(n) }
	libhooks.ReleaseReplayMemory = func(m any, n int64) { m.(*ReplayMemory).release(n) }
}

// ReplayMemory caps the bytes that replay buffers hold at once, across every
// request of a process (docs/retry-semantics.md#memory). A Transport reserves a
// body's bytes before it reads them; a body whose reservation fails is streamed
// once and never replayed, so the process never grows past the cap however many
// large requests arrive together. The zero value admits nothing; a nil
// *ReplayMemory admits everything. Safe for concurrent use.
type ReplayMemory struct {
	limit int64
	used  atomic.Int64
}

// NewReplayMemory returns a cap of limit bytes.
func NewReplayMemory(limit int64) *ReplayMemory { return &ReplayMemory{limit: limit} }

// tryReserve reserves n bytes if they fit under the cap.
func (m *ReplayMemory) tryReserve(n int64) bool {
	if m == nil {
		return true
	}
	for {
		used := m.used.Load()
		if used+n > m.limit || n < 0 {
			return false
		}
		if m.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// release gives back n reserved bytes.
func (m *ReplayMemory) release(n int64) {
	if m != nil && n != 0 {
		m.used.Add(-n)
	}
}

// InUse is the number of bytes reserved now.
func (m *ReplayMemory) InUse() int64 {
	if m == nil {
		return 0
	}
	return m.used.Load()
}

// Limit is the cap in bytes.
func (m *ReplayMemory) Limit() int64 {
	if m == nil {
		return 0
	}
	return m.limit
}
