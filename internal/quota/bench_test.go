package quota

import (
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// newFullClient is a client holding n send times, all due at t0 and good
// for an hour, its store idle.
func newFullClient(tb testing.TB, n int64) *Client {
	clk := clocktest.NewClock(t0)
	c := New(Spec{Name: "b", RequestsPerSecond: 1000, Burst: 100}, NewModel(clk), clk, Pod{Name: "pod"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), Observer{})
	c.hand.add(run{next: t0, left: n, lateness: time.Hour})
	return c
}

func TestTakeAtDoesNotAllocate(t *testing.T) {
	c := newFullClient(t, 1<<40)
	if n := testing.AllocsPerRun(1000, func() { c.TakeAt(t0, 0, 0) }); n != 0 {
		t.Errorf("TakeAt with send times on hand allocates %.0f times, want 0", n)
	}
}

// BenchmarkTakeAt is the hot path of a shared quota: a send time on hand,
// taken by many goroutines at once.
func BenchmarkTakeAt(b *testing.B) {
	c := newFullClient(b, 1<<40)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, v := c.TakeAt(t0, 0, 0); v != limits.QuotaGranted {
				b.Fatal("no send time")
			}
		}
	})
}

func TestAdmissionWaitsAreCountedByBucket(t *testing.T) {
	tests := map[string]struct {
		waited time.Duration
		bucket int
	}{
		"a send time on hand":              {0, 0},
		"a wait of one lease interval":     {Interval, 6},
		"a wait just past a bound":         {Interval + 1, 7},
		"a wait longer than every bound":   {time.Minute, len(WaitBuckets)},
		"a wait of exactly the last bound": {10 * time.Second, len(WaitBuckets) - 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newFullClient(t, 1)
			if _, v := c.TakeAt(t0, tc.waited, 0); v != limits.QuotaGranted {
				t.Fatalf("verdict %v, want granted", v)
			}
			counts, sum := c.AdmissionWaits()
			var want [len(WaitBuckets) + 1]uint64
			want[tc.bucket] = 1
			if counts != want || sum != tc.waited {
				t.Errorf("waits %v, sum %s; want %v, sum %s", counts, sum, want, tc.waited)
			}
		})
	}
}
