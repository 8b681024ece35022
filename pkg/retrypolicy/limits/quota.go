package limits

import (
	"context"
	"errors"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// Quota is a fleet-wide allowance that an upstream shares with other pods and
// other upstreams (a SharedQuota, docs/quota.md): every attempt, first or
// retry, starts at one of its send times, and at most its concurrency are in
// flight fleet-wide. Admission asks it locally: an implementation keeps the
// send times and slots it leased from its store on hand, so TakeAt never
// waits for the store. Implementations must be safe for concurrent use and
// TakeAt must not allocate.
type Quota interface {
	// TakeAt asks at now for a send time for one attempt that can wait
	// maxWait for it. waited is how long the same attempt has already waited
	// (0 on its first ask: the quota counts it in its demand once).
	//
	//	QuotaGranted  t is the attempt's: it starts at t.At (now, or later:
	//	              it waits) and no later than t.At + t.Slack, else the
	//	              send time is gone and it asks again; an attempt that
	//	              will not start gives t back (Untake)
	//	QuotaWait     none within maxWait: ask again at t.At (the next lease,
	//	              or the send time on hand beyond maxWait, as nothing
	//	              sooner will come)
	//	QuotaDenied   none will come in time: answer locally as deferred,
	//	              not before t.At (onStoreLoss Deny, a revoked pod)
	TakeAt(now time.Time, waited, maxWait time.Duration) (t SendTime, v QuotaVerdict)
	// Untake gives back a send time granted to an attempt that never started.
	Untake(t SendTime)
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

// SendTime is when a Quota lets one attempt start: at At, or up to Slack
// later. The fleet's send times are spaced 1/rate apart, and each is used
// within its slack, so the fleet starts at most rate × t + burst attempts in
// any window t (docs/quota.md#how-a-pod-draws-on-it).
type SendTime struct {
	At    time.Time
	Slack time.Duration
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

// takeQuota gets a send time of q for an attempt and waits for it with
// sleep, all within maxWait: a send time granted ahead is slept until, a
// wait for the next lease is slept and asked again, and an attempt that woke
// too late for its send time (a loaded machine) asks again, as the send time
// is gone. It returns the send time and the wait spent, or ErrShed with the
// time until one is expected (Retry-After), ErrQuotaDenied with the time
// before which the request is not to be sent again, or the context's error.
func takeQuota(ctx context.Context, q Quota, clk clock.Clock, sleep Sleeper, now time.Time,
	maxWait time.Duration) (SendTime, time.Duration, time.Duration, error) {
	start := now
	for {
		spent := now.Sub(start)
		t, v := q.TakeAt(now, spent, maxWait-spent)
		wait := t.At.Sub(now)
		if v == QuotaWait {
			wait = max(wait, time.Millisecond) // never a busy loop
		}
		switch {
		case v == QuotaDenied:
			return t, spent, wait, ErrQuotaDenied
		case v == QuotaWait && spent+wait > maxWait:
			return t, spent, wait, ErrShed
		}
		if wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				if v == QuotaGranted {
					q.Untake(t)
				}
				return t, spent, 0, err
			}
			now = clk.Now()
		}
		if v == QuotaGranted && !now.After(t.At.Add(t.Slack)) {
			return t, now.Sub(start), 0, nil
		}
	}
}
