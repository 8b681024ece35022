package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// blocking is an exporter that holds every export until release is closed.
type blocking struct {
	release chan struct{}
	n       atomic.Int64
}

func (b *blocking) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
		b.n.Add(int64(len(s)))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (*blocking) Shutdown(context.Context) error { return nil }

// Spans ended from many goroutines while the collector does not answer are
// each either exported or dropped and counted, and ending one never waits.
func TestQueueNeverBlocksAndCountsEverySpan(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	var dropped, exported atomic.Int64
	cfg := QueueConfig{Size: 64, BatchSize: 16, ScheduleDelay: 10 * time.Millisecond, ExportTimeout: time.Minute}
	q := newQueue(exp, cfg, func(_ string, n int) { dropped.Add(int64(n)) }, func(n int) { exported.Add(int64(n)) })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	tracer := tp.Tracer("test")

	const goroutines, each = 8, 500
	start := time.Now()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				_, s := tracer.Start(context.Background(), "x")
				s.End()
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("ending %d spans took %v with the collector stuck", goroutines*each, took)
	}
	close(exp.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dropped.Load() + exported.Load(); got != goroutines*each {
		t.Errorf("%d dropped + %d exported = %d, want every one of %d spans counted", dropped.Load(), exported.Load(), got, goroutines*each)
	}
	if dropped.Load() == 0 {
		t.Error("nothing dropped although the queue holds 64 spans and the collector was stuck")
	}
	if exported.Load() != exp.n.Load() {
		t.Errorf("counted %d exported, the exporter took %d", exported.Load(), exp.n.Load())
	}
}
