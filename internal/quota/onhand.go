package quota

import (
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// run is the send times of one lease still on hand, on the pod's clock: the
// next at next, then one every spacing, left of them; an attempt may start
// on each up to lateness after its time.
type run struct {
	next     time.Time
	spacing  time.Duration
	left     int64
	lateness time.Duration
}

// maxRuns bounds the leases on hand: a pod leases at most every Interval
// and is granted nothing beyond MaxAhead, so a few are live at a time; the
// oldest goes first when more come.
const maxRuns = 8

// maxReturned bounds the send times given back (Untake) and kept for
// another attempt; more are dropped.
const maxReturned = 8

// onHand is a pod's send times: the runs leased, and the send times given
// back by attempts that did not start. Not safe for concurrent use (the
// Client guards it); no method allocates.
type onHand struct {
	runs     [maxRuns]run
	n        int
	returned [maxReturned]limits.SendTime
	nret     int
	dropped  int64 // send times gone unused, all time
}

// add puts a lease's send times on hand.
func (h *onHand) add(r run) {
	if h.n == maxRuns {
		h.dropped += h.runs[0].left
		h.drop(0)
	}
	h.runs[h.n] = r
	h.n++
}

func (h *onHand) drop(i int) {
	copy(h.runs[i:h.n], h.runs[i+1:h.n])
	h.n--
	h.runs[h.n] = run{}
}

// skip drops the send times of r gone at now (their time plus lateness
// passed unused).
func (r *run) skip(now time.Time) (dropped int64) {
	late := now.Sub(r.next) - r.lateness
	if late <= 0 {
		return 0
	}
	gone := int64(late+r.spacing-1) / int64(max(r.spacing, 1))
	if gone >= r.left {
		gone, r.left = r.left, 0
		return gone
	}
	r.next = r.next.Add(time.Duration(gone) * r.spacing)
	r.left -= gone
	return gone
}

// take finds the earliest send time still good at now and grants it (ok)
// if it has come or comes within maxWait: a send time whose time has come
// starts at once (At now, Slack what is left of its lateness), a later one
// at its time. found is false when none is on hand; one found beyond
// maxWait is returned, not granted.
func (h *onHand) take(now time.Time, maxWait time.Duration) (t limits.SendTime, found, ok bool) {
	best, fromRun := -1, false
	for i := 0; i < h.nret; {
		if r := h.returned[i]; now.After(r.At.Add(r.Slack)) {
			h.nret--
			h.returned[i] = h.returned[h.nret]
			h.dropped++
			continue
		}
		if best < 0 || h.returned[i].At.Before(h.returned[best].At) {
			best = i
		}
		i++
	}
	if best >= 0 {
		t = h.returned[best]
	}
	for i := 0; i < h.n; {
		r := &h.runs[i]
		if h.dropped += r.skip(now); r.left == 0 {
			h.drop(i)
			continue
		}
		if best < 0 || r.next.Before(t.At) {
			best, fromRun, t = i, true, limits.SendTime{At: r.next, Slack: r.lateness}
		}
		i++
	}
	if best < 0 {
		return limits.SendTime{}, false, false
	}
	if t.At.Sub(now) > maxWait {
		return t, true, false
	}
	if fromRun {
		r := &h.runs[best]
		r.next = r.next.Add(r.spacing)
		if r.left--; r.left == 0 {
			h.drop(best)
		}
	} else {
		h.nret--
		h.returned[best] = h.returned[h.nret]
	}
	if t.At.Before(now) { // already due: start now, within what is left
		t = limits.SendTime{At: now, Slack: t.At.Add(t.Slack).Sub(now)}
	}
	return t, true, true
}

// giveBack keeps t for another attempt, if there is room.
func (h *onHand) giveBack(t limits.SendTime) {
	if h.nret < maxReturned {
		h.returned[h.nret] = t
		h.nret++
	}
}

// count is the number of send times on hand still good at now.
func (h *onHand) count(now time.Time) int64 {
	var n int64
	for i := 0; i < h.nret; i++ {
		if r := h.returned[i]; !now.After(r.At.Add(r.Slack)) {
			n++
		}
	}
	for i := 0; i < h.n; {
		r := &h.runs[i]
		if h.dropped += r.skip(now); r.left == 0 {
			h.drop(i)
			continue
		}
		n += r.left
		i++
	}
	return n
}
