package tracing

import (
	"context"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The reasons a span is dropped (the reason label of
// retry_sidecar_trace_spans_dropped_total).
const (
	DropQueueFull    = "queue_full"    // the queue was full: the collector is slow or down
	DropExportFailed = "export_failed" // the collector refused the batch or did not answer in time
)

// queue is a span processor with a bounded queue, like the SDK's batch
// processor but counting what it drops: a span that ends when the queue is
// full is dropped at once, so a collector that is down or slow never blocks
// a request. Ending a span takes a lock and an append; the exporting
// goroutine is woken only when a batch is full (or every ScheduleDelay), not
// per span, which would cost each request a wake-up.
type queue struct {
	exp sdktrace.SpanExporter
	cfg QueueConfig

	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan // waiting, at most cfg.Size

	full     chan struct{} // a batch is waiting (capacity 1)
	flush    chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// dropped and exported count spans (never nil).
	dropped  func(reason string, n int)
	exported func(n int)
}

func newQueue(exp sdktrace.SpanExporter, cfg QueueConfig, dropped func(string, int), exported func(int)) *queue {
	q := &queue{exp: exp, cfg: cfg, spans: make([]sdktrace.ReadOnlySpan, 0, cfg.Size),
		full: make(chan struct{}, 1), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		dropped: dropped, exported: exported}
	go q.run()
	return q
}

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it never waits.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.mu.Lock()
	if len(q.spans) >= q.cfg.Size {
		q.mu.Unlock()
		q.dropped(DropQueueFull, 1)
		return
	}
	q.spans = append(q.spans, s)
	n := len(q.spans)
	q.mu.Unlock()
	if n%q.cfg.BatchSize == 0 {
		select {
		case q.full <- struct{}{}:
		default: // already signalled
		}
	}
}

func (q *queue) run() {
	defer close(q.done)
	spare := make([]sdktrace.ReadOnlySpan, 0, q.cfg.Size)
	tick := time.NewTicker(q.cfg.ScheduleDelay)
	defer tick.Stop()
	for {
		select {
		case <-q.full:
			spare = q.exportQueued(spare)
		case <-tick.C:
			spare = q.exportQueued(spare)
		case ack := <-q.flush:
			spare = q.exportQueued(spare)
			close(ack)
		case <-q.stop:
			q.exportQueued(spare)
			return
		}
	}
}

// exportQueued takes every waiting span (leaving spare, emptied, in its
// place) and exports them in batches; it returns the emptied slice for reuse.
func (q *queue) exportQueued(spare []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	q.mu.Lock()
	taken := q.spans
	q.spans = spare[:0]
	q.mu.Unlock()
	for rest := taken; len(rest) > 0; {
		n := min(len(rest), q.cfg.BatchSize)
		q.export(rest[:n])
		rest = rest[n:]
	}
	clear(taken)
	return taken[:0]
}

// export sends batch, counting it as exported or dropped.
func (q *queue) export(batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.ExportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	if err != nil {
		q.dropped(DropExportFailed, len(batch))
	} else {
		q.exported(len(batch))
	}
}

// ForceFlush implements sdktrace.SpanProcessor: it exports what is queued.
func (q *queue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flush <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown implements sdktrace.SpanProcessor: it exports what is queued,
// within ctx, and shuts the exporter down.
func (q *queue) Shutdown(ctx context.Context) error {
	q.stopOnce.Do(func() { close(q.stop) })
	select {
	case <-q.done:
	case <-ctx.Done():
	}
	return q.exp.Shutdown(ctx)
}
