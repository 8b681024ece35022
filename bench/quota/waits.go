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
	w := waits{}
	prefix := `retry_sidecar_quota_admission_wait_seconds_bucket{`
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

// quantile is the least bucket bound at or under which a fraction q of the
// admissions waited, and false without admissions.
func (w waits) quantile(q float64) (time.Duration, bool) {
	total := w.total()
	if total == 0 {
		return 0, false
	}
	for _, b := range w.bounds() {
		if w[b] >= q*total {
			return time.Duration(b * float64(time.Second)), true
		}
	}
	return 0, false
}

// onHand is the share of the admissions that found a token on hand (waited 0).
func (w waits) onHand() float64 {
	if w.total() == 0 {
		return 0
	}
	return w[0] / w.total()
}

// String is "≤ p50 / ≤ p99 (on hand %)" of the admissions, "–" without any.
func (w waits) String() string {
	p50, ok := w.quantile(0.5)
	p99, _ := w.quantile(0.99)
	if !ok {
		return "–"
	}
	return "≤ " + p50.String() + " / ≤ " + p99.String() + " (" + strconv.FormatFloat(100*w.onHand(), 'f', 2, 64) + " % on hand)"
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
