package retrysim

import (
	"testing"
	"time"
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
