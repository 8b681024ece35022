package policyset

import (
	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The share maths: what one pod may start of an upstream's fleet-wide rate
// limit. The manager renders each pod's share (RenderUpstream); the sidecar
// builds its limiter from it (podRateLimit).

// PodShare is requestsPerMinute / max(1, pods): what one sidecar may start so
// that all of them together stay inside one account quota. With no ready pod the
// first one to become ready gets the whole quota rather than nothing.
func PodShare(requestsPerMinute, pods int32) float64 {
	return float64(requestsPerMinute) / float64(max(1, pods))
}

// PodBurst is ceil(burst / max(1, pods)), at least 1: the fleet together never
// starts more than burst (plus at most one per pod for the rounding) at once,
// and no pod is left unable to start anything.
//
//	burst 3, pods 4 -> 1    burst 5, pods 2 -> 3    burst 10, pods 5 -> 2    burst 3, pods 0 -> 3
func PodBurst(burst, pods int32) int32 {
	n := max(1, pods)
	return max(1, (burst+n-1)/n)
}

// podRateLimit is the limiter of one pod for the (defaulted) rate limit r of
// u: the pod share the manager rendered, or the whole upstream's limit where a
// document written by hand gives none.
func podRateLimit(r *v1alpha1.RateLimit, u Upstream) *limits.RateLimitConfig {
	perMinute := u.PodRequestsPerMinute
	if perMinute <= 0 {
		perMinute = float64(r.RequestsPerMinute)
	}
	burst := u.PodBurst
	if burst <= 0 {
		burst = *r.Burst
	}
	return &limits.RateLimitConfig{RequestsPerSecond: perMinute / 60, Burst: int(burst)}
}
