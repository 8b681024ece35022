/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// Default values, identical to the +kubebuilder:default markers. The API server
// applies the markers; SetDefaults applies these where no API server is involved
// (a policy file given to the sidecar). An envtest test proves both agree.
const (
	DefaultMaxAttempts         int32    = 3
	DefaultDeadline            Duration = "10s"
	DefaultBackoffBase         Duration = "100ms"
	DefaultBackoffMax          Duration = "10s"
	DefaultJitter              Jitter   = JitterFull
	DefaultConnectFailure               = true
	DefaultMaxReplayBodyBytes  int64    = 65536
	DefaultRetryAfterMaxWait   Duration = "30s"
	DefaultRetryAfterSpread    Duration = "1s"
	DefaultRetryPercent        int32    = 20
	DefaultMinRetriesPerSecond int32    = 10
	DefaultBurst               int32    = 1
	DefaultMaxQueued           int32    = 0
	DefaultQueueTimeout        Duration = "1s"
	DefaultRateLimitHeaders             = false
	DefaultHoldOnDeferral               = false
)

// DefaultStatusCodes and DefaultReplayableMethods are the list defaults.
var (
	DefaultStatusCodes       = []StatusCode{429, 503}
	DefaultReplayableMethods = []string{"GET", "HEAD", "OPTIONS"}
)

// SetDefaults fills every absent optional field of p with its default, in place,
// exactly as the API server's structural defaulting does.
func SetDefaults(p *RetryPolicy) {
	for i := range p.Spec.Upstreams {
		setUpstreamDefaults(&p.Spec.Upstreams[i])
	}
}

func setUpstreamDefaults(u *Upstream) {
	setIfNil(&u.MaxAttempts, DefaultMaxAttempts)
	setIfNil(&u.Deadline, DefaultDeadline)
	setIfNil(&u.Backoff, Backoff{})
	setIfNil(&u.Backoff.Base, DefaultBackoffBase)
	setIfNil(&u.Backoff.Max, DefaultBackoffMax)
	setIfNil(&u.Backoff.Jitter, DefaultJitter)
	setIfNil(&u.RetryOn, RetryOn{})
	if u.RetryOn.StatusCodes == nil {
		u.RetryOn.StatusCodes = append([]StatusCode(nil), DefaultStatusCodes...)
	}
	setIfNil(&u.RetryOn.ConnectFailure, DefaultConnectFailure)
	if u.ReplayableMethods == nil {
		u.ReplayableMethods = append([]string(nil), DefaultReplayableMethods...)
	}
	setIfNil(&u.MaxReplayBodyBytes, DefaultMaxReplayBodyBytes)
	setIfNil(&u.RetryAfter, RetryAfter{})
	setIfNil(&u.RetryAfter.MaxWait, DefaultRetryAfterMaxWait)
	setIfNil(&u.RetryAfter.Spread, DefaultRetryAfterSpread)
	setIfNil(&u.Budget, Budget{})
	setIfNil(&u.Budget.RetryPercent, DefaultRetryPercent)
	setIfNil(&u.Budget.MinRetriesPerSecond, DefaultMinRetriesPerSecond)
	if u.RateLimit != nil {
		setIfNil(&u.RateLimit.Burst, DefaultBurst)
	}
	if u.Concurrency != nil {
		setIfNil(&u.Concurrency.MaxQueued, DefaultMaxQueued)
		setIfNil(&u.Concurrency.QueueTimeout, DefaultQueueTimeout)
	}
	if u.Pacing != nil {
		setIfNil(&u.Pacing.RateLimitHeaders, DefaultRateLimitHeaders)
		setIfNil(&u.Pacing.HoldOnDeferral, DefaultHoldOnDeferral)
	}
}

func setIfNil[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}
