package retryhttp

import (
	"context"
	"log/slog"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// EventKind tells an attempt decision from a final outcome.
type EventKind uint8

const (
	// EventAttempt: one attempt ended (or was refused by admission) and was decided.
	EventAttempt EventKind = iota + 1
	// EventOutcome: the logical request ended; exactly one per request.
	EventOutcome
	// EventHoldStart: the upstream is held until NotBefore (started or
	// extended), for HoldReason (docs/pacing.md).
	EventHoldStart
	// EventHoldEnd: the hold until NotBefore ended.
	EventHoldEnd
	// EventHeld: a request met a hold: it waited Delay in line (Outcome empty) or
	// was answered locally at once (Outcome deferred, NotBefore the hold's end).
	EventHeld
	// EventAdmitted: transmission Attempt+1 waited for admission (R7) before
	// it could start: Delay for a start token of the rate limit, QuotaDelay
	// for the shared quota, QueueDelay in the concurrency queue, as admission
	// measured them, in that order. Sent only when it waited.
	EventAdmitted
)

func (k EventKind) String() string {
	switch k {
	case EventOutcome:
		return "outcome"
	case EventHoldStart:
		return "hold-start"
	case EventHoldEnd:
		return "hold-end"
	case EventHeld:
		return "held"
	case EventAdmitted:
		return "admitted"
	}
	return "attempt"
}

// RetryAfterParse is how a response's Retry-After header parsed
// (Event.RetryAfter): RetryAfterAbsent, RetryAfterMalformed, or the name of
// its HintForm ("seconds", "imf-fixdate", "rfc850", "asctime"). Empty on an
// attempt without a response.
type RetryAfterParse string

const (
	RetryAfterAbsent    RetryAfterParse = "absent"
	RetryAfterMalformed RetryAfterParse = "malformed"
)

// Event carries only the allow-listed fields of R10. It never holds header values
// (other than the request id), bodies, query strings or error texts (a Go
// *url.Error repeats the full URL), so an Observer cannot leak them by accident.
type Event struct {
	Kind EventKind
	// Context is the logical request's context (nil on hold start and end
	// events): an Observer that keeps state per request finds it there
	// (pkg/retryotel's spans). Nothing of the request is read from it here.
	Context context.Context
	// RequestID is the X-Request-Id of the request, else one generated per
	// logical request.
	RequestID string
	Upstream  string
	Method    string
	// Path is the URL path without the query.
	Path string
	// Attempt is the 1-based transmission number (attempt events) or the number of
	// transmissions made (outcome events).
	Attempt int
	// Status of the attempt's response; 0 if it had none.
	Status int
	// ErrorClass of an attempt without a response.
	ErrorClass retrypolicy.ErrorClass
	// Phase of a timeout: of the attempt (attempt events) or of the one that
	// ended the request (outcome events); "" when no timeout was involved.
	Phase Phase
	// Action decided after the attempt (attempt events).
	Action retrypolicy.Action
	// Delay is the planned wait before the next transmission (Action Retry).
	Delay time.Duration
	// NotBefore is the earliest retry time given to the caller (deferred and
	// deadline-exceeded).
	NotBefore time.Time
	// Outcome, on outcome events and on attempt events that end the request.
	Outcome retrypolicy.Outcome
	// RetryAfter is the parse result of the response's Retry-After, with
	// RetryAfterReason the ParseError reason when it is RetryAfterMalformed.
	RetryAfter       RetryAfterParse
	RetryAfterReason string
	// Elapsed, on outcome events, is the time from the start of the logical
	// request to its outcome (the response head the caller gets), waits and
	// every attempt included, on the Transport's clock.
	Elapsed time.Duration
	// Skew is local receipt time − the response's Date, if HasSkew.
	Skew    time.Duration
	HasSkew bool
	// RateLimitMalformed names a rate-limit header of the response that was
	// ignored as malformed (pacing.rateLimitHeaders), RateLimitReason why.
	RateLimitMalformed string
	RateLimitReason    string
	// HoldReason is why the upstream is held (hold events); its String is the
	// log value, "rate-limit" or "deferral" (docs/pacing.md).
	HoldReason limits.HoldReason
	// QuotaDelay is the time spent waiting for a token or a fleet-wide slot
	// of the shared quota (admitted events).
	QuotaDelay time.Duration
	// QueueDelay is the time spent in the concurrency queue (admitted events).
	QueueDelay time.Duration
}

// Observer receives one event per attempt decision and one per outcome. It is
// called synchronously on the request path, so it must be fast and safe for
// concurrent use; the sidecar attaches logs and Prometheus metrics here.
type Observer interface {
	Observe(Event)
}

// Observers fans events out to several observers in order.
type Observers []Observer

// Observe implements Observer.
func (os Observers) Observe(e Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// SlogObserver logs each event as one structured line with exactly the fields of
// R10: request_id, upstream, method, path, attempt, status, error_class,
// phase, decision, delay, not_before, outcome, retry_after, retry_after_reason, skew.
type SlogObserver struct {
	Logger *slog.Logger
	// AttemptLevel and OutcomeLevel default to Info (their zero value).
	AttemptLevel slog.Level
	OutcomeLevel slog.Level
}

// NewSlogObserver logs to l (slog.Default() if nil) at Info.
func NewSlogObserver(l *slog.Logger) *SlogObserver {
	if l == nil {
		l = slog.Default()
	}
	return &SlogObserver{Logger: l}
}

// Observe implements Observer.
func (o *SlogObserver) Observe(e Event) {
	switch e.Kind {
	case EventHeld, EventAdmitted:
		return // the request's outcome line says it; metrics count it
	case EventHoldStart, EventHoldEnd:
		o.observeHold(e)
		return
	}
	level, msg := o.AttemptLevel, "retry attempt"
	if e.Kind == EventOutcome {
		level, msg = o.OutcomeLevel, "retry outcome"
	}
	ctx := context.Background()
	if !o.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 15)
	attrs = append(attrs,
		slog.String("request_id", e.RequestID),
		slog.String("upstream", e.Upstream),
		slog.String("method", e.Method),
		slog.String("path", e.Path),
		slog.Int("attempt", e.Attempt),
	)
	if e.Status != 0 {
		attrs = append(attrs, slog.Int("status", e.Status))
	}
	if e.ErrorClass != retrypolicy.NoError {
		attrs = append(attrs, slog.String("error_class", e.ErrorClass.String()))
	}
	if e.Phase != "" {
		attrs = append(attrs, slog.String("phase", string(e.Phase)))
	}
	if e.Kind == EventAttempt {
		attrs = append(attrs, slog.String("decision", e.Action.String()))
		if e.Action == retrypolicy.Retry {
			attrs = append(attrs, slog.Duration("delay", e.Delay))
		}
	}
	if !e.NotBefore.IsZero() {
		attrs = append(attrs, slog.Time("not_before", e.NotBefore))
	}
	if e.Outcome != "" {
		attrs = append(attrs, slog.String("outcome", string(e.Outcome)))
	}
	if e.RetryAfter != "" {
		attrs = append(attrs, slog.String("retry_after", string(e.RetryAfter)))
	}
	if e.RetryAfterReason != "" {
		attrs = append(attrs, slog.String("retry_after_reason", e.RetryAfterReason))
	}
	if e.HasSkew {
		attrs = append(attrs, slog.Duration("skew", e.Skew))
	}
	if e.RateLimitMalformed != "" {
		attrs = append(attrs, slog.String("ratelimit_malformed", e.RateLimitMalformed),
			slog.String("ratelimit_reason", e.RateLimitReason))
	}
	o.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// observeHold logs the start and the end of a hold: upstream, until, reason
// (and the request whose response started it), at the outcome level.
func (o *SlogObserver) observeHold(e Event) {
	ctx := context.Background()
	if !o.Logger.Enabled(ctx, o.OutcomeLevel) {
		return
	}
	msg := "upstream hold ends"
	if e.Kind == EventHoldStart {
		msg = "upstream hold starts"
	}
	attrs := []slog.Attr{slog.String("upstream", e.Upstream), slog.Time("until", e.NotBefore),
		slog.String("reason", e.HoldReason.String())}
	if e.RequestID != "" {
		attrs = append(attrs, slog.String("request_id", e.RequestID))
	}
	o.Logger.LogAttrs(ctx, o.OutcomeLevel, msg, attrs...)
}
