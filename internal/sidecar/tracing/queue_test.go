package tracing

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/pkg/retryotel"
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

// The queue holds at most cfg.Bytes of spans (spanSize), those waiting and
// those in an export the collector has not answered: the spans past it are
// dropped as queue_full, and the bytes are free again once the export ends.
func TestQueueIsBoundedInBytes(t *testing.T) {
	exp := &blocking{release: make(chan struct{})}
	var mu sync.Mutex
	dropped := map[string]int{}
	var exported atomic.Int64
	tp := sdktrace.NewTracerProvider()
	big := strings.Repeat("s", 100<<10)
	end := func(tracer trace.Tracer) {
		_, s := tracer.Start(context.Background(), "GET")
		s.SetAttributes(retryotel.AttrHeaderServer.StringSlice([]string{big}))
		s.End()
	}
	// One span's size, as the queue weighs it.
	probe := tracetest.NewSpanRecorder()
	end(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(probe)).Tracer("probe"))
	size := spanSize(probe.Ended()[0])

	cfg := QueueConfig{Size: 1000, Bytes: 5*size + size/2, BatchSize: 512, ScheduleDelay: time.Millisecond, ExportTimeout: time.Minute}
	q := newQueue(exp, cfg, func(reason string, n int) { mu.Lock(); dropped[reason] += n; mu.Unlock() },
		func(n int) { exported.Add(int64(n)) })
	tp.RegisterSpanProcessor(q)
	tracer := tp.Tracer("test")
	for range 20 {
		end(tracer)
	}
	mu.Lock()
	if got := dropped[DropQueueFull]; got != 15 {
		t.Errorf("%d spans dropped as queue_full with the collector stuck, want 15 (5 of %d bytes fit in %d)", got, size, cfg.Bytes)
	}
	mu.Unlock()
	close(exp.release)
	polltest.UntilTrue(t, 10*time.Second, func() bool { return exported.Load() == 5 })
	for range 5 {
		end(tracer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := exported.Load(); got != 10 {
		t.Errorf("%d spans exported, want 10: the bytes of the first 5 free again once exported", got)
	}
}

// spanSize weighs a span by what it holds: a long value counts its bytes.
func TestSpanSizeCountsTheValues(t *testing.T) {
	probe := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(probe)).Tracer("probe")
	_, s := tracer.Start(context.Background(), "GET")
	s.SetAttributes(retryotel.AttrMethod.String("GET"), retryotel.AttrHeaderVia.StringSlice([]string{"1.1 a", strings.Repeat("v", 1000)}))
	s.AddEvent(retryotel.EventWait, trace.WithAttributes(retryotel.AttrReason.String("backoff")))
	s.End()
	want := spanOverhead + len("GET") +
		attrOverhead + len(retryotel.AttrMethod) + len("GET") +
		attrOverhead + len(retryotel.AttrHeaderVia) + 16 + len("1.1 a") + 16 + 1000 +
		eventOverhead + len(retryotel.EventWait) + attrOverhead + len(retryotel.AttrReason) + len("backoff")
	if got := spanSize(probe.Ended()[0]); got != want {
		t.Errorf("spanSize = %d, want %d", got, want)
	}
}
