package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// waits is a quota's admission-wait histogram
// (retry_sidecar_quota_admission_wait_seconds) summed over sidecars: the
// admissions that waited at most each bucket's bound, in seconds.
type waits map[float64]float64

// waitsOf sums quota q's histogram over the /metrics bodies.
func waitsOf(bodies [][]byte, q string) waits {
	return histogramOf(bodies, "retry_sidecar_quota_admission_wait_seconds", q)
}

// histogramOf sums quota q's series of the histogram named metric over the
// /metrics bodies (its buckets in seconds, as waits).
func histogramOf(bodies [][]byte, metric, q string) waits {
	w := waits{}
	prefix := metric + `_bucket{`
	for _, body := range bodies {
		for line := range strings.Lines(string(body)) {
			labels, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), prefix)
			if !ok || !strings.Contains(labels, `quota="`+q+`"`) {
				continue
			}
			le, ok := between(labels, `le="`, `"`)
			_, v, _ := strings.Cut(labels, "} ")
			bound, err1 := strconv.ParseFloat(le, 64)
			n, err2 := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if ok && err1 == nil && err2 == nil {
				w[bound] += n
			}
		}
	}
	return w
}

func between(s, from, to string) (string, bool) {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, to)
	return v, ok
}

// minus is w less the counts of an earlier reading.
func (w waits) minus(earlier waits) waits {
	out := waits{}
	for b, n := range w {
		out[b] = n - earlier[b]
	}
	return out
}

// bounds are the buckets' bounds in order, +Inf last.
func (w waits) bounds() []float64 { return slices.Sorted(maps.Keys(w)) }

// total is the number of admissions: the +Inf bucket's.
func (w waits) total() float64 { return w[math.Inf(1)] }

// quantile is "≤ b", b the least bucket bound at or under which a fraction
// q of the observations fall ("> b" of the largest finite bound when only
// +Inf holds them), and "" without observations.
func (w waits) quantile(q float64) string {
	total := w.total()
	if total == 0 {
		return ""
	}
	last := 0.0
	for _, b := range w.bounds() {
		if w[b] >= q*total {
			if math.IsInf(b, 1) {
				return "> " + seconds(last).String()
			}
			return "≤ " + seconds(b).String()
		}
		last = b
	}
	return ""
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// atMost is the number of admissions that waited at most d (a bucket bound).
func (w waits) atMost(d time.Duration) float64 { return w[d.Seconds()] }

// latency is "≤ p50 / ≤ p99" of the observations, "–" without any.
func (w waits) latency() string {
	if w.total() == 0 {
		return "–"
	}
	return w.quantile(0.5) + " / " + w.quantile(0.99)
}

// onHand is the share of the admissions that found a send time on hand (waited 0).
func (w waits) onHand() float64 {
	if w.total() == 0 {
		return 0
	}
	return w[0] / w.total()
}

// String is "≤ p50 / ≤ p99 (on hand %)" of the admissions, "–" without any.
func (w waits) String() string {
	if w.total() == 0 {
		return "–"
	}
	return w.latency() + " (" + strconv.FormatFloat(100*w.onHand(), 'f', 2, 64) + " % on hand)"
}

// buckets is each bucket's own count (not cumulative), by bound, in order.
func (w waits) buckets() string {
	var b strings.Builder
	prev := 0.0
	for _, bound := range w.bounds() {
		fmt.Fprintf(&b, " %g: %.0f", bound, w[bound]-prev)
		prev = w[bound]
	}
	return "[" + strings.TrimSpace(b.String()) + "]"
}
