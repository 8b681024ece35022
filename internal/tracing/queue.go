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
// a request. One goroutine exports batches of BatchSize, or what is there
// every ScheduleDelay.
type queue struct {
	exp      sdktrace.SpanExporter
	cfg      QueueConfig
	spans    chan sdktrace.ReadOnlySpan
	flush    chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// dropped and exported count spans (never nil).
	dropped  func(reason string, n int)
	exported func(n int)
}

func newQueue(exp sdktrace.SpanExporter, cfg QueueConfig, dropped func(string, int), exported func(int)) *queue {
	q := &queue{exp: exp, cfg: cfg, spans: make(chan sdktrace.ReadOnlySpan, cfg.Size),
		flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
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
	select {
	case q.spans <- s:
	default:
		q.dropped(DropQueueFull, 1)
	}
}

func (q *queue) run() {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.cfg.BatchSize)
	tick := time.NewTicker(q.cfg.ScheduleDelay)
	defer tick.Stop()
	for {
		select {
		case s := <-q.spans:
			if batch = append(batch, s); len(batch) >= q.cfg.BatchSize {
				batch = q.export(batch)
			}
		case <-tick.C:
			batch = q.export(batch)
		case ack := <-q.flush:
			batch = q.exportQueued(batch)
			close(ack)
		case <-q.stop:
			q.exportQueued(batch)
			return
		}
	}
}

// exportQueued exports batch and every span queued now.
func (q *queue) exportQueued(batch []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	for {
		select {
		case s := <-q.spans:
			if batch = append(batch, s); len(batch) >= q.cfg.BatchSize {
				batch = q.export(batch)
			}
		default:
			return q.export(batch)
		}
	}
}

// export sends batch, counting it as exported or dropped, and returns it
// emptied for reuse.
func (q *queue) export(batch []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.ExportTimeout)
	err := q.exp.ExportSpans(ctx, batch)
	cancel()
	if err != nil {
		q.dropped(DropExportFailed, len(batch))
	} else {
		q.exported(len(batch))
	}
	clear(batch)
	return batch[:0]
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
