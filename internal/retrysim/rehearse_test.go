package retrysim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the virtual start of every rehearsal.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func rehearse(t *testing.T, upstream string, concurrency int) RehearseResult {
	t.Helper()
	set, err := LoadPolicyFile("testdata/seed-plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := PickUpstream(set, upstream)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := Rehearse(RehearseInput{Policy: p, Requests: 600, Quota: 120, QuotaWindow: time.Minute,
		Concurrency: concurrency, Latency: 2 * time.Second, Seed: 1, Start: t0})
	if err != nil {
		t.Fatal(err)
	}
	// Minutes of virtual time in well under a few seconds of real time, even on
	// a shared machine under the race detector.
	if real := time.Since(began); real > 20*time.Second {
		t.Errorf("the rehearsal took %s of real time", real)
	}
	return res
}

// The seed plan: 120/minute allowed, 90/minute targeted by rateLimit, 600
// requests ≈ 400 s, mean concurrency 1.5/s × 2 s = 3, and not a single 429.
func TestRehearseSeedPlanIsPacedBelowTheQuota(t *testing.T) {
	res := rehearse(t, "paced", 10)
	if res.VirtualDurationValue() < 400*time.Second {
		t.Errorf("virtual duration %s, want >= 400s", res.VirtualDuration)
	}
	want := RehearseResult{
		Upstream: "paced", Requests: 600, Quota: "120/m", Concurrency: 10, Latency: "2s", Seed: 1,
		Plan:          Plan{RequestsPerMinute: 90, MinDuration: "6m40s", MeanConcurrency: 3},
		FirstAttempts: 600, Retries: 0, Successes: 600, FinalErrors: map[string]int{}, Status429: 0,
		StartSpacing:    Spacing{Min: "0s", P50: "667ms", Max: "667ms"},
		PeakConcurrency: 5, MeanConcurrency: 3, VirtualDuration: "6m40s",
	}
	if diff := cmp.Diff(want, res, cmp.AllowUnexported(RehearseResult{}), cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".virtual"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Without rateLimit the same workload runs into the quota: 429s, retries after
// the server's Retry-After, and requests deferred because the server's wait
// does not fit their deadline.
func TestRehearseWithoutRateLimitRunsIntoTheQuota(t *testing.T) {
	res := rehearse(t, "unpaced", 10)
	if res.Status429 == 0 || res.Retries == 0 || res.FinalErrors["deferred"] == 0 {
		t.Errorf("want 429s, retries and deferred requests; got %+v", res)
	}
	if got := res.Successes + sum(res.FinalErrors); got != 600 {
		t.Errorf("successes + final errors = %d, want 600", got)
	}
	if res.FirstAttempts != 600 {
		t.Errorf("first attempts %d, want 600", res.FirstAttempts)
	}
	// The upstream admits at most 120 per rolling minute, so successes are
	// bounded by the minutes the rehearsal lasted.
	minutes := int(res.VirtualDurationValue()/time.Minute) + 1
	if res.Successes > 120*minutes {
		t.Errorf("%d successes in %s: more than the quota allows", res.Successes, res.VirtualDuration)
	}
	if res.PeakConcurrency != 10 {
		t.Errorf("peak concurrency %d, want 10 (every worker in flight at the start)", res.PeakConcurrency)
	}
}

// The policy's concurrency gate holds attempts in flight to maxInFlight and
// sheds what its bounded queue cannot hold.
func TestRehearseConcurrencyGateBoundsInFlightAndSheds(t *testing.T) {
	res := rehearse(t, "gated", 10)
	if res.PeakConcurrency != 2 {
		t.Errorf("peak concurrency %d, want 2 (maxInFlight)", res.PeakConcurrency)
	}
	if res.FinalErrors["shed"] == 0 || res.Status429 != 0 {
		t.Errorf("want shed requests and no 429; got %+v", res)
	}
}

func TestRehearseIsDeterministicForASeed(t *testing.T) {
	for _, up := range []string{"unpaced", "gated"} {
		a, b := rehearse(t, up, 10), rehearse(t, up, 10)
		if diff := cmp.Diff(a, b, cmp.AllowUnexported(RehearseResult{})); diff != "" {
			t.Errorf("%s: two runs with seed 1 differ:\n%s", up, diff)
		}
	}
}

func TestParseQuota(t *testing.T) {
	tests := map[string]struct {
		in     string
		n      int
		window time.Duration
		err    string
	}{
		"per minute":             {in: "120/m", n: 120, window: time.Minute},
		"per second":             {in: "5/s", n: 5, window: time.Second},
		"per hour":               {in: "1000/h", n: 1000, window: time.Hour},
		"a unit that is unknown": {in: "120/d", err: `--quota "120/d": unit must be s, m or h (e.g. 120/m)`},
		"no count":               {in: "/m", err: `--quota "/m": want COUNT/UNIT with COUNT >= 1 and UNIT s, m or h, e.g. 120/m`},
		"zero":                   {in: "0/m", err: `--quota "0/m": want COUNT/UNIT with COUNT >= 1 and UNIT s, m or h, e.g. 120/m`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n, w, err := ParseQuota(tc.in)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil || n != tc.n || w != tc.window {
				t.Fatalf("got %d/%s %v, want %d/%s", n, w, err, tc.n, tc.window)
			}
		})
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
