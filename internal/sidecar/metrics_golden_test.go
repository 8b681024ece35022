package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

const metricsGolden = "testdata/metrics.golden"

// TestMetricNamesMatchTheGoldenFile: every retry_sidecar_ series, its type
// and its labels, as a scrape shows them once each has a value, are those of
// testdata/metrics.golden. Dashboards and alerts outside the repository rely
// on the names: a rename or a changed label fails here, and
// go test -run TestMetricNamesMatchTheGoldenFile -update rewrites the file
// when the change is meant (docs/observability.md then says so).
func TestMetricNamesMatchTheGoldenFile(t *testing.T) {
	m := NewMetrics()
	giveEverySeriesAValue(m)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "retry_sidecar_") {
			continue // the Go runtime's and the process's: not ours to name
		}
		fmt.Fprintf(&b, "%s %s %s\n", f.GetName(), strings.ToLower(f.GetType().String()), labelNames(f))
	}
	got := b.String()
	if *update {
		if err := os.WriteFile(metricsGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("the sidecar's series differ from %s (a rename breaks dashboards outside the repository; if meant, run with -update):\ngot:\n%swant:\n%s", metricsGolden, got, want)
	}
}

// labelNames are the label names of a family's first series, comma-separated
// ("-": none).
func labelNames(f *dto.MetricFamily) string {
	var names []string
	for _, l := range f.GetMetric()[0].GetLabel() {
		names = append(names, l.GetName())
	}
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ",")
}

// giveEverySeriesAValue makes every labelled series of m exist, through the
// calls the sidecar makes, so that a scrape lists them all.
func giveEverySeriesAValue(m *Metrics) {
	m.ConfigLoaded("h", []string{"u"}, 1)
	m.ConfigStale("api")
	m.APIWatchFallback("forbidden")
	m.Observe(retryhttp.Event{Kind: retryhttp.EventAttempt, Upstream: "u", Status: 503, Action: retrypolicy.Retry,
		Phase: retryhttp.PhaseConnect, RetryAfter: retryhttp.RetryAfterMalformed, RetryAfterReason: "r",
		RateLimitMalformed: "RateLimit", RateLimitReason: "r", HasSkew: true})
	m.WatchLimits(func(yield func(string, *limits.State)) { yield("u", limits.New(limits.Config{})) })
	m.QuotaObserver().Lease("q", time.Millisecond, 0, errors.New("unreachable"))
	m.WatchQuota(quota.New(quota.Spec{Name: "q"}, nil, clock.Real{}, quota.Pod{}, nil, quota.Observer{}))
}
