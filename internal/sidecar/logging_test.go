package sidecar

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// A retry's log line gives its delay and skew in the API's notation, not
// in nanoseconds (docs/sidecar.md#logs).
func TestLogLinesWriteDurationsInTheAPIsNotation(t *testing.T) {
	var buf bytes.Buffer
	obs := NewLogObserver(slog.New(NewLogHandler(&buf, slog.LevelInfo)))
	obs.Observe(retryhttp.Event{Kind: retryhttp.EventAttempt, Upstream: "up", Method: "GET", Path: "/", Attempt: 1, Status: 503,
		Action: retrypolicy.Retry, Delay: 500 * time.Millisecond, HasSkew: true, Skew: -2 * time.Second})
	line := buf.String()
	for _, want := range []string{`"delay":"500ms"`, `"skew":"-2s"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %s lacks %s", line, want)
		}
	}
}
