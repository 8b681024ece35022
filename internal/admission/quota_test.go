package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// scriptedQuota answers TakeAt from a script (an in-memory stand-in for the
// pure bookkeeping of Admit; the real client is tested in internal/quota).
type scriptedQuota struct {
	answers []QuotaVerdict
	wait    time.Duration
	asked   []time.Duration // the waited argument of each ask
	untaken int
	slots   *Gate
}

func (q *scriptedQuota) TakeAt(_ time.Time, waited time.Duration) (time.Duration, QuotaVerdict) {
	q.asked = append(q.asked, waited)
	v := q.answers[min(len(q.asked), len(q.answers))-1]
	if v == QuotaGranted {
		return 0, v
	}
	return q.wait, v
}
func (q *scriptedQuota) Untake()                       { q.untaken++ }
func (q *scriptedQuota) Slots() *Gate                  { return q.slots }
func (q *scriptedQuota) HoldUntil(time.Time) time.Time { return time.Time{} }
func (q *scriptedQuota) Hold(time.Time)                {}

func TestAdmitDrawsOnTheQuota(t *testing.T) {
	tests := map[string]struct {
		answers     []QuotaVerdict
		gate        *ConcurrencyConfig
		slots       int // fleet slots leased, -1: no concurrency bound
		maxWait     time.Duration
		wantErr     error
		wantRA      time.Duration
		wantAsked   []time.Duration
		wantUntaken int
	}{
		"a token on hand admits at once": {
			answers: []QuotaVerdict{QuotaGranted}, slots: -1, maxWait: time.Second, wantAsked: []time.Duration{0}},
		"no token waits for the next lease and asks again": {
			answers: []QuotaVerdict{QuotaWait, QuotaWait, QuotaGranted}, slots: -1, maxWait: time.Second,
			wantAsked: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}},
		"a wait past the deadline is shed with the time of the next lease": {
			answers: []QuotaVerdict{QuotaWait}, slots: -1, maxWait: 50 * time.Millisecond,
			wantErr: ErrShed, wantRA: 100 * time.Millisecond, wantAsked: []time.Duration{0}},
		"a denial answers locally": {
			answers: []QuotaVerdict{QuotaDenied}, slots: -1, maxWait: time.Second,
			wantErr: ErrQuotaDenied, wantRA: 100 * time.Millisecond, wantAsked: []time.Duration{0}},
		"a full local gate gives the token back": {
			answers: []QuotaVerdict{QuotaGranted}, gate: &ConcurrencyConfig{MaxInFlight: 0, QueueTimeout: time.Second},
			slots: -1, maxWait: time.Second, wantErr: ErrShed, wantRA: time.Second, wantAsked: []time.Duration{0}, wantUntaken: 1},
		"no fleet slot leased gives the token back": {
			answers: []QuotaVerdict{QuotaGranted}, slots: 0, maxWait: time.Second,
			wantErr: ErrShed, wantRA: time.Second, wantAsked: []time.Duration{0}, wantUntaken: 1},
		"a leased fleet slot admits": {
			answers: []QuotaVerdict{QuotaGranted}, slots: 1, maxWait: time.Second, wantAsked: []time.Duration{0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(now)
			q := &scriptedQuota{answers: tc.answers, wait: 100 * time.Millisecond}
			if tc.slots >= 0 {
				q.slots = NewGate(ConcurrencyConfig{MaxInFlight: tc.slots, QueueTimeout: time.Second})
			}
			l := New(Settings{Quota: q, Concurrency: tc.gate})
			sleep := func(_ context.Context, d time.Duration) error { clk.Advance(d); return nil }
			tk, ra, err := l.Admit(context.Background(), clk, sleep, tc.maxWait)
			if !errors.Is(err, tc.wantErr) || ra != tc.wantRA {
				t.Fatalf("Admit = %s, %v; want %s, %v", ra, err, tc.wantRA, tc.wantErr)
			}
			if len(q.asked) != len(tc.wantAsked) || q.untaken != tc.wantUntaken {
				t.Fatalf("asked %v, untaken %d; want %v, %d", q.asked, q.untaken, tc.wantAsked, tc.wantUntaken)
			}
			for i := range q.asked {
				if q.asked[i] != tc.wantAsked[i] {
					t.Errorf("ask %d waited %s, want %s", i, q.asked[i], tc.wantAsked[i])
				}
			}
			if err == nil {
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
