package limits

import (
	"sync"
	"time"
)

// BudgetWindow is the sliding window of the outage budget (R6).
const BudgetWindow = 10 * time.Second

const (
	budgetBuckets = 20
	budgetBucket  = BudgetWindow / budgetBuckets // 500ms resolution
)

// Budget is the outage budget of one upstream (R6): a retry is allowed only while,
// over the last 10 s,
//
//	retries + 1 <= firsts·retryPercent/100 + minRetriesPerSecond·10
//
// so that in a full outage retries add at most retryPercent % to the load (plus the
// floor that lets quiet upstreams retry at all). Example, retryPercent 20,
// minRetriesPerSecond 0: after 10 first attempts the 2nd retry is allowed and the
// 3rd is refused; 5 s after the window has moved past them, all are forgotten.
//
// Counts live in 500 ms buckets. The methods are safe for concurrent use; each has
// a twin taking the time (RecordFirstAt, TryRetryAt) for tests. A time that goes
// backwards counts into the newest bucket. A nil *Budget means "no budget": it
// allows every retry.
type Budget struct {
	mu      sync.Mutex
	cfg     BudgetConfig
	epoch   time.Time
	started bool
	head    int64 // absolute index of the newest bucket
	firsts  [budgetBuckets]int64
	retries [budgetBuckets]int64
	nFirst  int64 // sums over the window
	nRetry  int64
}

// newBudget returns an empty budget.
func newBudget(cfg BudgetConfig) *Budget { return &Budget{cfg: cfg} }

// setConfig changes the limits and keeps the counts (config reload).
func (b *Budget) setConfig(cfg BudgetConfig) {
	b.mu.Lock()
	b.cfg = cfg
	b.mu.Unlock()
}

// RecordFirstAt counts a first attempt at now.
func (b *Budget) RecordFirstAt(now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	i := b.advance(now)
	b.firsts[i]++
	b.nFirst++
	b.mu.Unlock()
}

// TryRetryAt spends one retry at now if the budget allows it and reports whether
// it did.
func (b *Budget) TryRetryAt(now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.advance(now)
	allowed := int64(b.cfg.MinRetriesPerSecond)*int64(BudgetWindow/time.Second)*100 + b.nFirst*int64(b.cfg.RetryPercent)
	if (b.nRetry+1)*100 > allowed {
		return false
	}
	b.retries[i]++
	b.nRetry++
	return true
}

// CountsAt returns the first attempts and retries inside the window ending at now.
func (b *Budget) CountsAt(now time.Time) (firsts, retries int64) {
	if b == nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.nFirst, b.nRetry
}

// advance moves the window to now, forgetting buckets that left it, and returns
// the ring index of the bucket for now. Caller holds mu.
func (b *Budget) advance(now time.Time) int {
	if !b.started {
		b.started, b.epoch = true, now
	}
	idx := int64(now.Sub(b.epoch) / budgetBucket)
	if idx > b.head {
		if idx-b.head >= budgetBuckets {
			b.firsts, b.retries = [budgetBuckets]int64{}, [budgetBuckets]int64{}
			b.nFirst, b.nRetry = 0, 0
		} else {
			for j := b.head + 1; j <= idx; j++ {
				r := int(j % budgetBuckets)
				b.nFirst -= b.firsts[r]
				b.nRetry -= b.retries[r]
				b.firsts[r], b.retries[r] = 0, 0
			}
		}
		b.head = idx
	}
	return int(b.head % budgetBuckets)
}
