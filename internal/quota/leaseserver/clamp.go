package leaseserver

import (
	"math"
	"time"

	"github.com/retrydev/retry-operator/internal/quota"
)

// MaxHold bounds a pacing hold a pod reports for the fleet: a partner's
// quota reset is at most a day away (docs/pacing.md).
const MaxHold = 24 * time.Hour

// Clamp bounds every number of a lease request by the quota's spec, so that
// no value a pod sends is stored or used unbounded:
//
//	field         bound
//	want          0 … ⌊rate × 300 ms⌋ + 1        (quota.MaxWant: the most one lease grants)
//	due           0 … want                       (those of them for attempts waiting now)
//	demand        0 … 1000 × max(rate, 1)/s      (JSON carries no NaN or infinity)
//	slots, inUse  0 … concurrency
//	hold          zero, or now … now + MaxHold   (a past hold holds nothing)
//
// For example, with rate 20/s and burst 10,
// {"want":1000000000,"due":-5,"demand":1e300} becomes want 7, due 0,
// demand 20000. The store bounds want, due and demand alike (quota.Model):
// the endpoint does not rely on it.
func Clamp(r quota.LeaseRequest, spec quota.Spec, now time.Time) quota.LeaseRequest {
	r.Want = min(max(r.Want, 0), quota.MaxWant(spec.RequestsPerSecond))
	r.Due = min(max(r.Due, 0), r.Want)
	r.Demand = min(max(r.Demand, 0), 1000*max(spec.RequestsPerSecond, 1))
	if math.IsNaN(r.Demand) {
		r.Demand = 0
	}
	conc := int64(spec.Concurrency)
	r.Slots = min(max(r.Slots, 0), conc)
	r.InUse = min(max(r.InUse, 0), conc)
	switch {
	case r.Hold.IsZero():
	case !r.Hold.After(now):
		r.Hold = time.Time{}
	case r.Hold.After(now.Add(MaxHold)):
		r.Hold = now.Add(MaxHold)
	}
	return r
}
