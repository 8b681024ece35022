package v1alpha1

import (
	"reflect"
	"testing"
)

// The named defaults are what SetDefaults (the CRD's markers) applies. A
// marker without a named constant is fine: only a constant can disagree.
func TestDefaultConstantsAreTheMarkers(t *testing.T) {
	p := RetryPolicy{Spec: RetryPolicySpec{Upstreams: []Upstream{{
		Name: "api", Hosts: []string{"api.example"},
		RateLimit: &RateLimit{RequestsPerMinute: 60}, Concurrency: &Concurrency{MaxInFlight: 1}, Pacing: &Pacing{},
	}}}}
	SetDefaults(&p)
	u := p.Spec.Upstreams[0]
	pairs := map[string][2]any{
		"maxAttempts":                     {*u.MaxAttempts, DefaultMaxAttempts},
		"deadline":                        {*u.Deadline, DefaultDeadline},
		"backoff.base":                    {*u.Backoff.Base, DefaultBackoffBase},
		"backoff.max":                     {*u.Backoff.Max, DefaultBackoffMax},
		"backoff.jitter":                  {*u.Backoff.Jitter, DefaultJitter},
		"retryOn.statusCodes":             {u.RetryOn.StatusCodes, DefaultStatusCodes},
		"retryOn.connectFailure":          {*u.RetryOn.ConnectFailure, DefaultConnectFailure},
		"replayableMethods":               {u.ReplayableMethods, DefaultReplayableMethods},
		"maxReplayBodyBytes":              {*u.MaxReplayBodyBytes, DefaultMaxReplayBodyBytes},
		"retryAfter.maxWait":              {*u.RetryAfter.MaxWait, DefaultRetryAfterMaxWait},
		"retryAfter.spread":               {*u.RetryAfter.Spread, DefaultRetryAfterSpread},
		"budget.retryPercent":             {*u.Budget.RetryPercent, DefaultRetryPercent},
		"budget.minRetriesPerSecond":      {*u.Budget.MinRetriesPerSecond, DefaultMinRetriesPerSecond},
		"rateLimit.burst":                 {*u.RateLimit.Burst, DefaultBurst},
		"concurrency.maxQueued":           {*u.Concurrency.MaxQueued, DefaultMaxQueued},
		"concurrency.queueTimeout":        {*u.Concurrency.QueueTimeout, DefaultQueueTimeout},
		"pacing.rateLimitHeaders":         {*u.Pacing.RateLimitHeaders, DefaultRateLimitHeaders},
		"pacing.holdOnDeferral":           {*u.Pacing.HoldOnDeferral, DefaultHoldOnDeferral},
		"rateLimit.requestsPerMinute set": {u.RateLimit.RequestsPerMinute, int32(60)},
	}
	for field, p := range pairs {
		if !reflect.DeepEqual(p[0], p[1]) {
			t.Errorf("%s: SetDefaults gives %v, the named default is %v", field, p[0], p[1])
		}
	}
}

// Set fields, empty lists and numbers beyond float64's precision survive.
func TestSetDefaultsKeepsWhatIsSet(t *testing.T) {
	u := Upstream{Name: "api", Hosts: []string{"api.example"}, MaxReplayBodyBytes: ptr(int64(1<<62 + 1)),
		RetryOn: &RetryOn{StatusCodes: []StatusCode{}, ConnectFailure: ptr(false)}, ReplayableMethods: []string{}}
	p := RetryPolicy{Spec: RetryPolicySpec{Upstreams: []Upstream{u}}}
	SetDefaults(&p)
	got := p.Spec.Upstreams[0]
	if *got.MaxReplayBodyBytes != 1<<62+1 || got.RetryOn.StatusCodes == nil || len(got.RetryOn.StatusCodes) != 0 ||
		*got.RetryOn.ConnectFailure || got.ReplayableMethods == nil || len(got.ReplayableMethods) != 0 {
		t.Fatalf("SetDefaults changed set fields: %+v, retryOn %+v", got, *got.RetryOn)
	}
}
