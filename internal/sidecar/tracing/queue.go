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
// a request. Full is cfg.Size spans waiting, or cfg.Bytes (spanSize) held
// waiting or in an export not finished yet: a collector that never answers
// costs no more memory than that (and one batch's encoding), whatever the
// spans carry. Ending a span takes a lock and an append; the exporting
// goroutine is woken only when a batch is full (cfg.BatchSize spans or
// batchBytes) or every ScheduleDelay, not per span, which would cost each
// request a wake-up.
type queue struct {
	exp sdktrace.SpanExporter
	cfg QueueConfig

	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan // waiting, at most cfg.Size
	bytes int                     // spanSize of the spans waiting or being exported, at most cfg.Bytes
	ready int                     // spanSize of the spans waiting

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
	if cfg.Bytes <= 0 {
		cfg.Bytes = DefaultQueueBytes
	}
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
	size := spanSize(s)
	q.mu.Lock()
	if len(q.spans) >= q.cfg.Size || q.bytes+size > q.cfg.Bytes {
		q.mu.Unlock()
		q.dropped(DropQueueFull, 1)
		return
	}
	q.spans = append(q.spans, s)
	q.bytes += size
	q.ready += size
	n, ready := len(q.spans), q.ready
	q.mu.Unlock()
	if n%q.cfg.BatchSize == 0 || ready >= q.batchBytes() {
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
// place) and exports them in batches of at most cfg.BatchSize spans and
// batchBytes (one span at least); it returns the emptied slice for reuse.
func (q *queue) exportQueued(spare []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	q.mu.Lock()
	taken := q.spans
	q.spans, q.ready = spare[:0], 0
	q.mu.Unlock()
	for rest := taken; len(rest) > 0; {
		n, size := 0, 0
		for n < len(rest) && n < q.cfg.BatchSize {
			s := spanSize(rest[n])
			if n > 0 && size+s > q.batchBytes() {
				break
			}
			n, size = n+1, size+s
		}
		q.export(rest[:n], size)
		rest = rest[n:]
	}
	clear(taken)
	return taken[:0]
}

// batchBytes bounds the spanSize of one export: the exporter holds a copy of
// the batch, encoded, while the collector takes it, and collectors refuse
// large requests (4 MiB by default over gRPC).
func (q *queue) batchBytes() int { return q.cfg.Bytes / 8 }

// export sends batch, whose spanSize is size, counting it as exported or
// dropped; its bytes are released once the exporter is done with it.
func (q *queue) export(batch []sdktrace.ReadOnlySpan, size int) {
	cleanBatch(batch)
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.ExportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	q.mu.Lock()
	q.bytes -= size
	q.mu.Unlock()
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
