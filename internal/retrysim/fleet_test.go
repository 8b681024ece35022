package retrysim

import (
	"testing"
	"time"
)

func rehearseFleet(t *testing.T, upstream string) RehearseResult {
	t.Helper()
	const file = "testdata/seed-fleet.yaml"
	f, err := ReadPolicyFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PickUpstream(f.Set, upstream)
	if err != nil {
		t.Fatal(err)
	}
	q, err := f.SharedQuotaOf(p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rehearse(RehearseInput{Policy: p, Requests: 600, Quota: 120, QuotaWindow: time.Minute,
		Concurrency: 10, Latency: 2 * time.Second, Seed: 1, Start: t0, Pods: 10, Skew: [2]int{10, 1}, SharedQuota: q})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The seed plan for ten pods with 10:1 skew: through one SharedQuota the fleet
// keeps the 90/minute target (600 requests in ≥ 400 s), never meets a 429
// and every request succeeds.
func TestRehearseSeedPlanForAFleet(t *testing.T) {
	res := rehearseFleet(t, "shared")
	t.Logf("%+v", res)
	if v := res.VirtualDurationValue(); v < 400*time.Second || v > 420*time.Second {
		t.Errorf("virtual duration %s, want 400 s to 420 s (600 at 90/min)", res.VirtualDuration)
	}
	if res.Successes != 600 || res.Status429 != 0 || res.Retries != 0 || len(res.FinalErrors) != 0 {
		t.Errorf("successes %d, 429s %d, retries %d, final errors %v; want 600, 0, 0, none",
			res.Successes, res.Status429, res.Retries, res.FinalErrors)
	}
	if res.Pods != 10 || res.Skew != "10:1" || res.SharedQuota != "partner-payments" || res.Plan.RequestsPerMinute != 90 {
		t.Errorf("pods %d, skew %q, quota %q, plan %v/min; want 10, 10:1, partner-payments, 90",
			res.Pods, res.Skew, res.SharedQuota, res.Plan.RequestsPerMinute)
	}
}

// The same fleet with today's split of rateLimit: the busy pod gets a tenth
// of the target for more than half of the requests, so more than a third of
// all requests are shed while the quiet pods leave their share unused.
func TestRehearseSplitRateLimitShedsTheBusyPod(t *testing.T) {
	res := rehearseFleet(t, "split")
	t.Logf("%+v", res)
	if res.FinalErrors["shed"] < 200 || res.Successes+res.FinalErrors["shed"] != 600 {
		t.Errorf("successes %d, final errors %v; want at least 200 of 600 shed", res.Successes, res.FinalErrors)
	}
}
