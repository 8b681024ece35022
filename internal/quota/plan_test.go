package quota

import (
	"math"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

func TestWant(t *testing.T) {
	tests := map[string]struct {
		demand      float64
		onHand, due int64
		want        int64
	}{
		"a busy pod asks for two intervals of its demand":         {189, 0, 0, 38},
		"send times on hand are subtracted":                       {189, 30, 0, 8},
		"a pod with demand and none on hand asks for one":         {2, 0, 0, 1},
		"a pod holding one asks for nothing more than its demand": {2, 1, 0, 0},
		"a lease kicked by waiting attempts asks for them":        {0, 0, 3, 3},
		"a pod without demand asks for nothing":                   {0, 0, 0, 0},
		"holding more than the demand asks for nothing":           {10, 5, 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Want(tc.demand, tc.onHand, tc.due); got != tc.want {
				t.Errorf("Want = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMaxWant(t *testing.T) {
	tests := map[string]struct {
		rate float64
		want int64
	}{
		"1.5/s: one send time fits within 300 ms": {1.5, 1},
		"20/s: 6 in 300 ms, and the one at now":   {20, 7},
		"1000/s: 301":                             {1000, 301},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := MaxWant(tc.rate); got != tc.want {
				t.Errorf("MaxWant(%g) = %d, want %d", tc.rate, got, tc.want)
			}
		})
	}
}

func TestScheduleOf(t *testing.T) {
	tests := map[string]struct {
		rate  float64
		burst int
		want  Schedule
	}{
		"burst 10 at 300/s: 30 ms of lateness, none in the past": {300, 10, Schedule{1e6 / 300, 9 * 1e6 / 300, 0}},
		"burst 500 at 1000/s: 499 ms, 299 ms in the past":        {1000, 500, Schedule{1000, 499000, 299000}},
		"burst 1 leaves the least lateness":                      {100, 1, Schedule{10000, 1000, 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ScheduleOf(tc.rate, tc.burst); got != tc.want {
				t.Errorf("ScheduleOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDivideIsMaxMin(t *testing.T) {
	inf := math.Inf(1)
	tests := map[string]struct {
		capacity     float64
		demands      []float64
		level, extra float64
	}{
		"demands above the capacity: the smaller ones whole, the rest level": {300, []float64{400, 10, 20}, 270, 0},
		"demands within it: each whole and the rest split evenly":            {300, []float64{100, 100}, inf, 50},
		"an absurd demand takes no more than an even share":                  {300, []float64{1e12, 1e12, 50}, 125, 0},
		"no demand at all: the capacity split evenly":                        {300, []float64{0, 0, 0}, inf, 100},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if level, extra := divide(tc.capacity, tc.demands); level != tc.level || extra != tc.extra {
				t.Errorf("divide = %g, %g; want %g, %g", level, extra, tc.level, tc.extra)
			}
		})
	}
}

func TestShareOf(t *testing.T) {
	claims := []claim{{"a1", "x", 200}, {"a2", "x", 100}, {"b", "y", 200}}
	tests := map[string]struct {
		claims []claim
		self   int
		maxMin bool
		want   float64
	}{
		"a namespace's absurd claim leaves the other its own": {[]claim{{"a", "x", 1e9}, {"b", "y", 100}}, 1, false, 100},
		"and takes the rest": {[]claim{{"a", "x", 1e9}, {"b", "y", 100}}, 0, false, 200},
		"a namespace's part goes to its pods by their claims":     {claims, 0, false, 100},
		"or max-min (the slots)":                                  {claims, 0, true, 75},
		"claims that fit get what they claim and the rest evenly": {[]claim{{"a1", "x", 20}, {"a2", "x", 10}}, 0, false, 155},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := shareOf(300, tc.claims, tc.claims[tc.self], tc.maxMin); got != tc.want {
				t.Errorf("shareOf = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestFallbackFor(t *testing.T) {
	spec := Spec{RequestsPerSecond: 1000, Burst: 100}
	tests := map[string]struct {
		mode  StoreLoss
		share float64
		pods  int
		want  Fallback
	}{
		"LastShare admits the pod's last share of the rate": {StoreLossLastShare, 500, 10, Fallback{Rate: 500, Burst: 50}},
		"EvenShare admits the rate divided by the pods":     {StoreLossEvenShare, 500, 10, Fallback{Rate: 100, Burst: 10}},
		"Deny admits nothing":                               {StoreLossDeny, 500, 10, Fallback{Deny: true}},
		"a pod that never reached the store admits nothing": {StoreLossLastShare, 0, 0, Fallback{Deny: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := FallbackFor(tc.mode, spec, tc.share, tc.pods); got != tc.want {
				t.Errorf("FallbackFor = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSlotsWant(t *testing.T) {
	tests := map[string]struct {
		inFlight, queued int
		busy             bool
		want             int64
	}{
		"a pod without demand asks for none":                 {0, 0, false, 0},
		"a pod with an attempt since its lease asks for one": {0, 0, true, 1},
		"in flight and queued, plus one":                     {1, 1, true, 3},
		"at most the concurrency":                            {3, 5, true, 3},
		"in flight counts as demand":                         {2, 0, false, 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := SlotsWant(tc.inFlight, tc.queued, 3, tc.busy); got != tc.want {
				t.Errorf("SlotsWant = %d, want %d", got, tc.want)
			}
		})
	}
}

// onHand hands out send times in order, never before their time and never
// later than their lateness, and keeps those given back.
func TestSendTimesOnHand(t *testing.T) {
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// send times at 10, 15 and 20 ms, each good for 2 ms
	three := run{next: at(10 * ms), spacing: 5 * ms, left: 3, lateness: 2 * ms}
	tests := map[string]struct {
		now, maxWait time.Duration
		back         []time.Duration // given back before, each good for 1 ms
		want         time.Duration   // At, from t0
		slack        time.Duration
		found, ok    bool
		left         int64
	}{
		"one ahead beyond maxWait is found, not taken":            {0, 5 * ms, nil, 10 * ms, 2 * ms, true, false, 3},
		"one ahead within maxWait is reserved":                    {0, 10 * ms, nil, 10 * ms, 2 * ms, true, true, 2},
		"one whose time has come starts now, within its lateness": {11 * ms, 0, nil, 11 * ms, ms, true, true, 2},
		"one past its lateness is gone, the next is taken":        {13 * ms, 2 * ms, nil, 15 * ms, 2 * ms, true, true, 1},
		"all past their lateness: none on hand":                   {23 * ms, time.Second, nil, 0, 0, false, false, 0},
		"one given back is taken first when earlier":              {0, 10 * ms, []time.Duration{5 * ms}, 5 * ms, ms, true, true, 3},
		"one given back and gone is dropped":                      {7 * ms, 10 * ms, []time.Duration{5 * ms}, 10 * ms, 2 * ms, true, true, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var h onHand
			h.add(three)
			for _, b := range tc.back {
				h.giveBack(adm(at(b), ms))
			}
			st, found, ok := h.take(at(tc.now), tc.maxWait)
			if found != tc.found || ok != tc.ok || (found && (!st.At.Equal(at(tc.want)) || st.Slack != tc.slack)) {
				t.Errorf("take = %s +%s, found %v, ok %v; want %s +%s, %v, %v", st.At.Sub(t0), st.Slack, found, ok,
					tc.want, tc.slack, tc.found, tc.ok)
			}
			if n := h.count(at(tc.now)); n != tc.left {
				t.Errorf("%d left on hand, want %d", n, tc.left)
			}
		})
	}
}

func adm(at time.Time, slack time.Duration) limits.SendTime {
	return limits.SendTime{At: at, Slack: slack}
}
