package limits

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// answer is one scripted answer of TakeAt: the verdict, the send time (or
// the time to ask again) as a wait from the ask, and its slack.
type answer struct {
	v           QuotaVerdict
	wait, slack time.Duration
}

// scriptedQuota answers TakeAt from a script (an in-memory stand-in for the
// pure bookkeeping of Admit; the real client is tested in internal/quota).
type scriptedQuota struct {
	answers []answer
	asked   []time.Duration // the waited argument of each ask
	maxWait []time.Duration // and its maxWait
	untaken []SendTime
	slots   *Gate
}

func (q *scriptedQuota) TakeAt(now time.Time, waited, maxWait time.Duration) (SendTime, QuotaVerdict) {
	q.asked = append(q.asked, waited)
	q.maxWait = append(q.maxWait, maxWait)
	a := q.answers[min(len(q.asked), len(q.answers))-1]
	return SendTime{At: now.Add(a.wait), Slack: a.slack}, a.v
}
func (q *scriptedQuota) Untake(t SendTime)             { q.untaken = append(q.untaken, t) }
func (q *scriptedQuota) Slots() *Gate                  { return q.slots }
func (q *scriptedQuota) HoldUntil(time.Time) time.Time { return time.Time{} }
func (q *scriptedQuota) Hold(time.Time)                {}

const ms = time.Millisecond

// grantedAnswer grants a send time now; leaseAnswer says to ask again at the next lease.
var grantedAnswer, leaseAnswer = answer{v: QuotaGranted}, answer{v: QuotaWait, wait: 100 * ms}

// admitDrawsOnTheQuotaCases are the cases of TestAdmitDrawsOnTheQuota.
var admitDrawsOnTheQuotaCases = map[string]struct {
	answers []answer
	gate    *ConcurrencyConfig
	slots   int           // fleet slots leased, -1: no concurrency bound
	late    time.Duration // every sleep ends this much late
	cancel  bool          // the context ends during the first sleep
	maxWait time.Duration
	wantErr error
	wantRA  time.Duration
	// the waited argument of each ask; the wait admission reports; the
	// send times given back, as waits from the start
	wantAsked   []time.Duration
	wantWaited  time.Duration
	wantUntaken []time.Duration
}{
	"a send time on hand admits at once": {
		answers: []answer{grantedAnswer}, slots: -1, maxWait: time.Second, wantAsked: []time.Duration{0}},
	"a send time ahead is waited for": {
		answers: []answer{{v: QuotaGranted, wait: 30 * ms, slack: 5 * ms}}, slots: -1, maxWait: time.Second,
		wantAsked: []time.Duration{0}, wantWaited: 30 * ms},
	"no send time waits for the next leaseAnswer and asks again": {
		answers: []answer{leaseAnswer, leaseAnswer, grantedAnswer}, slots: -1, maxWait: time.Second,
		wantAsked: []time.Duration{0, 100 * ms, 200 * ms}, wantWaited: 200 * ms},
	"a wait past the deadline is shed with the time of the next leaseAnswer": {
		answers: []answer{leaseAnswer}, slots: -1, maxWait: 50 * ms,
		wantErr: ErrShed, wantRA: 100 * ms, wantAsked: []time.Duration{0}},
	"a send time on hand beyond the deadline is shed with its time": {
		answers: []answer{{v: QuotaWait, wait: 300 * ms}}, slots: -1, maxWait: 250 * ms,
		wantErr: ErrShed, wantRA: 300 * ms, wantAsked: []time.Duration{0}},
	"an attempt that wakes too late for its send time asks again": {
		answers: []answer{{v: QuotaGranted, wait: 30 * ms, slack: 5 * ms}, grantedAnswer}, slots: -1, late: 10 * ms,
		maxWait: time.Second, wantAsked: []time.Duration{0, 40 * ms}, wantWaited: 40 * ms},
	"an attempt that wakes late within the slack starts": {
		answers: []answer{{v: QuotaGranted, wait: 30 * ms, slack: 15 * ms}}, slots: -1, late: 10 * ms,
		maxWait: time.Second, wantAsked: []time.Duration{0}, wantWaited: 40 * ms},
	"an attempt cancelled while it waits for its send time gives it back": {
		answers: []answer{{v: QuotaGranted, wait: 30 * ms, slack: 5 * ms}}, slots: -1, cancel: true,
		maxWait: time.Second, wantErr: context.Canceled, wantAsked: []time.Duration{0}, wantUntaken: []time.Duration{30 * ms}},
	"a denial answers locally": {
		answers: []answer{{v: QuotaDenied, wait: 100 * ms}}, slots: -1, maxWait: time.Second,
		wantErr: ErrQuotaDenied, wantRA: 100 * ms, wantAsked: []time.Duration{0}},
	"a full local gate gives the send time back": {
		answers: []answer{grantedAnswer}, gate: &ConcurrencyConfig{MaxInFlight: 0, QueueTimeout: time.Second},
		slots: -1, maxWait: time.Second, wantErr: ErrShed, wantRA: time.Second, wantAsked: []time.Duration{0},
		wantUntaken: []time.Duration{0}},
	"no fleet slot leased gives the send time back": {
		answers: []answer{grantedAnswer}, slots: 0, maxWait: time.Second,
		wantErr: ErrShed, wantRA: time.Second, wantAsked: []time.Duration{0}, wantUntaken: []time.Duration{0}},
	"a leased fleet slot admits": {
		answers: []answer{grantedAnswer}, slots: 1, maxWait: time.Second, wantAsked: []time.Duration{0}},
}

func TestAdmitDrawsOnTheQuota(t *testing.T) {
	tests := admitDrawsOnTheQuotaCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(now)
			q := &scriptedQuota{answers: tc.answers}
			if tc.slots >= 0 {
				q.slots = NewGate(ConcurrencyConfig{MaxInFlight: tc.slots, QueueTimeout: time.Second})
			}
			l := New(Config{Quota: q, Concurrency: tc.gate})
			sleep := func(_ context.Context, d time.Duration) error {
				if tc.cancel {
					return context.Canceled
				}
				clk.Advance(d + tc.late)
				return nil
			}
			tk, ra, err := l.Admit(context.Background(), clk, sleep, tc.maxWait)
			if !errors.Is(err, tc.wantErr) || ra != tc.wantRA {
				t.Fatalf("Admit = %s, %v; want %s, %v", ra, err, tc.wantRA, tc.wantErr)
			}
			if len(q.asked) != len(tc.wantAsked) || len(q.untaken) != len(tc.wantUntaken) {
				t.Fatalf("asked %v, untaken %v; want %v, %v", q.asked, q.untaken, tc.wantAsked, tc.wantUntaken)
			}
			for i := range q.asked {
				if q.asked[i] != tc.wantAsked[i] || q.maxWait[i] != tc.maxWait-tc.wantAsked[i] {
					t.Errorf("ask %d waited %s with %s left, want %s with %s", i, q.asked[i], q.maxWait[i],
						tc.wantAsked[i], tc.maxWait-tc.wantAsked[i])
				}
			}
			for i, u := range q.untaken {
				if want := now.Add(tc.wantUntaken[i]); !u.At.Equal(want) {
					t.Errorf("send time given back at %s, want %s", u.At.Sub(now), tc.wantUntaken[i])
				}
			}
			if err == nil {
				if tk.Waited.Quota != tc.wantWaited {
					t.Errorf("waited for the quota %s, want %s", tk.Waited.Quota, tc.wantWaited)
				}
				if l.InFlight() != 1 {
					t.Errorf("in flight %d, want 1", l.InFlight())
				}
				tk.Release(clk.Now())
				if l.InFlight() != 0 || (q.slots != nil && q.slots.InFlight() != 0) {
					t.Errorf("after Release: in flight %d, want 0 (and the fleet slot back)", l.InFlight())
				}
			}
		})
	}
}
