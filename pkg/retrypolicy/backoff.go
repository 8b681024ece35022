package retrypolicy

import (
	"math"
	"time"
)

// Ceiling is c = min(Max, Base·2^retryIndex), the backoff window before retry
// number retryIndex (0 = the first retry). It saturates at Max for any index,
// however large, instead of overflowing.
//
//	Base 1s, Max 8s: index 0 → 1s, 1 → 2s, 2 → 4s, 3 → 8s, 4 → 8s, 1000 → 8s
func (b Backoff) Ceiling(retryIndex int) time.Duration {
	if retryIndex < 0 {
		retryIndex = 0
	}
	if b.Base <= 0 {
		return 0
	}
	if retryIndex >= 62 || b.Base > b.Max>>uint(retryIndex) {
		return b.Max
	}
	return min(b.Base<<uint(retryIndex), b.Max)
}

// Delay is the local backoff before retry number retryIndex, with the random
// number u in [0, 1] (out-of-range and NaN are clamped). The randomness is a
// parameter so that every schedule is testable (R2):
//
//	Base 1s, Max 8s     index 0   1   2   3   4
//	Full,  u = 1               1s  2s  4s  8s  8s   (window; u = 0 gives 0)
//	Equal, u = 0             0.5s  1s  2s  4s  4s
//	Equal, u = 1               1s  2s  4s  8s  8s
//	None,  any u               1s  2s  4s  8s  8s
func (b Backoff) Delay(retryIndex int, u float64) time.Duration {
	c := b.Ceiling(retryIndex)
	u = clampUnit(u)
	switch b.Jitter {
	case JitterNone:
		return c
	case JitterEqual:
		half := c / 2
		return c - half + scale(half, u) // c − half keeps odd nanoseconds: u = 1 gives exactly c
	default: // JitterFull; Compile refuses anything else
		return scale(c, u)
	}
}

// scale returns u·d for u in [0, 1], never more than d.
func scale(d time.Duration, u float64) time.Duration {
	f := u * float64(d)
	if f >= float64(d) {
		return d
	}
	return time.Duration(f)
}

func clampUnit(u float64) float64 {
	if !(u > 0) { // also NaN
		return 0
	}
	if u > 1 || math.IsInf(u, 1) {
		return 1
	}
	return u
}
