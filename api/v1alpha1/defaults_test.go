package v1alpha1

import (
	"reflect"
	"testing"
)

// The named defaults are what SetDefaults (the CRD's markers) applies.
func TestDefaultConstantsAreTheMarkers(t *testing.T) {
	p := RetryPolicy{Spec: RetryPolicySpec{Upstreams: []Upstream{{
		Name: "api", Hosts: []string{"api.example"},
		RateLimit: &RateLimit{RequestsPerMinute: 60}, Concurrency: &Concurrency{MaxInFlight: 1}, Pacing: &Pacing{},
	}}}}
	SetDefaults(&p)
	want := Upstream{
		Name: "api", Hosts: []string{"api.example"},
		MaxAttempts: ptr(DefaultMaxAttempts), Deadline: ptr(DefaultDeadline),
		Backoff: &Backoff{Base: ptr(DefaultBackoffBase), Max: ptr(DefaultBackoffMax), Jitter: ptr(DefaultJitter)},
		RetryOn:            &RetryOn{StatusCodes: DefaultStatusCodes, ConnectFailure: ptr(DefaultConnectFailure)},
		ReplayableMethods:  DefaultReplayableMethods,
		MaxReplayBodyBytes: ptr(DefaultMaxReplayBodyBytes),
		RetryAfter:         &RetryAfter{MaxWait: ptr(DefaultRetryAfterMaxWait), Spread: ptr(DefaultRetryAfterSpread)},
		Budget:             &Budget{RetryPercent: ptr(DefaultRetryPercent), MinRetriesPerSecond: ptr(DefaultMinRetriesPerSecond)},
		RateLimit:          &RateLimit{RequestsPerMinute: 60, Burst: ptr(DefaultBurst)},
		Concurrency:        &Concurrency{MaxInFlight: 1, MaxQueued: ptr(DefaultMaxQueued), QueueTimeout: ptr(DefaultQueueTimeout)},
		Pacing:             &Pacing{RateLimitHeaders: ptr(DefaultRateLimitHeaders), HoldOnDeferral: ptr(DefaultHoldOnDeferral)},
	}
	if got := p.Spec.Upstreams[0]; !reflect.DeepEqual(got, want) {
		t.Fatalf("SetDefaults gave\n%+v\nthe named defaults are\n%+v", got, want)
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
