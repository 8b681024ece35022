package clocktest

import (
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestClockFiresTimersInTimeThenCreationOrder(t *testing.T) {
	c := NewClock(t0)
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, name+"@"+c.Now().Sub(t0).String()) }
	}
	c.AfterFunc(2*time.Second, at("b"))
	c.AfterFunc(time.Second, at("a"))
	c.AfterFunc(2*time.Second, at("c"))
	stopped := c.AfterFunc(1500*time.Millisecond, at("never"))
	ch := c.NewTimer(3 * time.Second).C()
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	c.Advance(2500 * time.Millisecond)
	if want := "[a@1s b@2s c@2s]"; fmtList(got) != want {
		t.Fatalf("fired %v, want %s", got, want)
	}
	if now := c.Now().Sub(t0); now != 2500*time.Millisecond {
		t.Fatalf("now = %s, want 2.5s", now)
	}
	select {
	case <-ch:
		t.Fatal("the 3s timer fired at 2.5s")
	default:
	}
	if !c.Next() {
		t.Fatal("Next found no timer")
	}
	if v := <-ch; v.Sub(t0) != 3*time.Second {
		t.Fatalf("timer sent %s, want +3s", v.Sub(t0))
	}
	if c.Next() {
		t.Fatal("Next moved with no timer pending")
	}
}

// clockTimersAndTimeCases are the cases of TestClockTimersAndTime.
var clockTimersAndTimeCases = map[string]func(t *testing.T, c *Clock){
	"a timer of 0s fires on the next move, even a move by 0s": func(t *testing.T, c *Clock) {
		tm := c.NewTimer(0)
		select {
		case <-tm.C():
			t.Fatal("the timer fired before the clock was moved")
		default:
		}
		c.Advance(0)
		if v := <-tm.C(); !v.Equal(t0) {
			t.Fatalf("timer sent %v, want %v", v, t0)
		}
	},
	"a timer stops once, and not after it fired": func(t *testing.T, c *Clock) {
		a, b := c.NewTimer(time.Second), c.NewTimer(time.Second)
		if !a.Stop() || a.Stop() {
			t.Fatal("Stop of a pending timer: want true, then false")
		}
		c.Advance(time.Second)
		if b.Stop() {
			t.Fatal("Stop of a fired timer reported true")
		}
	},
	"Pending counts timers neither fired nor stopped": func(t *testing.T, c *Clock) {
		c.NewTimer(time.Second)
		c.AfterFunc(2*time.Second, func() {})
		stopped := c.NewTimer(3 * time.Second)
		if got := c.Pending(); got != 3 {
			t.Fatalf("Pending() = %d, want 3", got)
		}
		stopped.Stop()
		c.Advance(time.Second)
		if got := c.Pending(); got != 1 {
			t.Fatalf("Pending() after one stop and one fire = %d, want 1", got)
		}
	},
	"a timer's function may use the clock and sees its own time": func(t *testing.T, c *Clock) {
		var at time.Duration
		var chained clock.Timer
		c.AfterFunc(time.Second, func() {
			at = c.Now().Sub(t0)
			chained = c.NewTimer(time.Second) // due at 2s, inside the same Advance
		})
		c.Advance(5 * time.Second)
		if at != time.Second {
			t.Fatalf("the function read %s, want 1s", at)
		}
		if v := <-chained.C(); v.Sub(t0) != 2*time.Second {
			t.Fatalf("the timer made by the function sent +%s, want +2s", v.Sub(t0))
		}
	},
	"the clock never moves backwards": func(t *testing.T, c *Clock) {
		c.AdvanceTo(t0.Add(-time.Hour))
		if !c.Now().Equal(t0) {
			t.Fatalf("Now() = %v after AdvanceTo the past, want %v", c.Now(), t0)
		}
	},
	"NextAt is the earliest pending timer": func(t *testing.T, c *Clock) {
		if _, ok := c.NextAt(); ok {
			t.Fatal("NextAt reported a timer on a new clock")
		}
		c.NewTimer(3 * time.Second)
		c.AfterFunc(2*time.Second, func() {})
		if at, ok := c.NextAt(); !ok || at.Sub(t0) != 2*time.Second {
			t.Fatalf("NextAt() = +%s, %v; want +2s, true", at.Sub(t0), ok)
		}
	},
	"BeforeFire runs before each timer": func(t *testing.T, c *Clock) {
		var log []string
		c.BeforeFire = func() { log = append(log, "before") }
		c.AfterFunc(time.Second, func() { log = append(log, "fire") })
		c.AfterFunc(2*time.Second, func() { log = append(log, "fire") })
		c.Advance(3 * time.Second)
		// once more when no due timer is left
		if want := "[before fire before fire before]"; fmtList(log) != want {
			t.Fatalf("calls %v, want %s", log, want)
		}
	},
}

func TestClockTimersAndTime(t *testing.T) {
	tests := clockTimersAndTimeCases
	for name, test := range tests {
		t.Run(name, func(t *testing.T) { test(t, NewClock(t0)) })
	}
}

func fmtList(xs []string) string {
	out := "["
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}
