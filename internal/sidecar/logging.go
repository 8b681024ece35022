package sidecar

import (
	"io"
	"log/slog"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// LogObserver logs the Transport's events with exactly the fields of docs/retry-semantics.md#r10
// (through retryhttp.SlogObserver, which never sees a header value other than
// the request id, a body, a query string or an error text). The one routine case,
// a request answered successfully by its first transmission, is logged at Debug;
// every retry, deferral, refusal and failure at Info:
//
//	event                                        level
//	attempt 1 → success, outcome success (1)     Debug
//	attempt 1 → 503 → retry                      Info
//	outcome deferred / exhausted / shed / …      Info
//
// so --log-level=debug gives one line per attempt decision and per outcome, and
// the default Info keeps a busy sidecar's log to what an operator acts on.
type LogObserver struct {
	routine, notable *retryhttp.SlogObserver
}

// NewLogObserver logs to l.
func NewLogObserver(l *slog.Logger) *LogObserver {
	return &LogObserver{
		routine: &retryhttp.SlogObserver{Logger: l, AttemptLevel: slog.LevelDebug, OutcomeLevel: slog.LevelDebug},
		notable: &retryhttp.SlogObserver{Logger: l, AttemptLevel: slog.LevelInfo, OutcomeLevel: slog.LevelInfo},
	}
}

// Observe implements retryhttp.Observer.
func (o *LogObserver) Observe(e retryhttp.Event) {
	if e.Attempt == 1 && e.Outcome == retrypolicy.OutcomeSuccess {
		o.routine.Observe(e)
		return
	}
	o.notable.Observe(e)
}

// ParseLevel reads a --log-level value: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// NewLogHandler is the sidecar's log format (docs/sidecar.md#logs): JSON
// lines at level and above, durations in Go's notation, the API's ("500ms",
// "2.5s"), where slog would write integer nanoseconds.
func NewLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationAsText})
}

func durationAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
