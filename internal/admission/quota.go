package admission

import (
	"context"
	"errors"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Quota is a fleet-wide allowance that an upstream shares with other pods and
// other upstreams (a SharedQuota, docs/quota.md): every attempt, first or
// retry, takes one of its tokens, and at most its concurrency are in flight
// fleet-wide. Admission asks it locally: an implementation keeps the tokens
// and slots it leased from its store on hand, so TakeAt never waits for the
// store. Implementations must be safe for concurrent use and TakeAt must not
// allocate.
type Quota interface {
	// TakeAt asks for one start token at now. waited is how long the same
	// attempt has already waited for one (0 on its first ask): a quota may
	// weigh long waiters more, so the fleet serves them about in order.
	//
	//	QuotaGranted  a token is taken: the attempt may start
	//	QuotaWait     none on hand; wait is when the next is expected
	//	QuotaDenied   none will come in time: answer locally as deferred,
	//	              not before wait from now (onStoreLoss Deny)
	TakeAt(now time.Time, waited time.Duration) (wait time.Duration, v QuotaVerdict)
	// Untake gives back a token taken for an attempt that never started.
	Untake()
	// Slots is the gate of the fleet-wide concurrency leased to this pod, nil
	// when the quota bounds none. Admission holds one of its slots per attempt.
	Slots() *Gate
	// HoldUntil is the end of a fleet-wide pacing hold in force at now, or the
	// zero time.
	HoldUntil(now time.Time) time.Time
	// Hold tells the fleet that a response of this pod held the upstream until
	// `until` (docs/pacing.md): every pod drawing on the quota holds too.
	Hold(until time.Time)
}

// QuotaVerdict is the answer of Quota.TakeAt.
type QuotaVerdict uint8

// The verdicts of Quota.TakeAt.
const (
	QuotaGranted QuotaVerdict = iota
	QuotaWait
	QuotaDenied
)

// ErrQuotaDenied is returned by Admit when the upstream's quota refuses the
// attempt outright (its store is lost and onStoreLoss is Deny): the request is
// answered locally as deferred, nothing is sent.
var ErrQuotaDenied = errors.New("retrypolicy: shared quota denied the attempt")

// takeQuota takes a token of q for an attempt, waiting with sleep for the next
// lease while maxWait allows. It returns the wait spent, or ErrShed with the
// time until a token is expected, ErrQuotaDenied with the time before which
// the request is not to be sent again, or the context's error.
func takeQuota(ctx context.Context, q Quota, clk clock.Clock, sleep Sleeper, now time.Time,
	maxWait time.Duration) (time.Duration, time.Duration, error) {
	start := now
	wait, v := q.TakeAt(now, 0)
	for v == QuotaWait {
		spent := now.Sub(start)
		if spent+wait > maxWait {
			return spent, wait, ErrShed
		}
		if err := sleep(ctx, wait); err != nil {
			return spent, 0, err
		}
		now = clk.Now()
		wait, v = q.TakeAt(now, now.Sub(start))
	}
	if v == QuotaDenied {
		return now.Sub(start), wait, ErrQuotaDenied
	}
	return now.Sub(start), 0, nil
}
