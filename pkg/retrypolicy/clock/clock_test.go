package clock

import (
	"testing"
	"time"
)

func TestRealNowIsTheSystemTime(t *testing.T) {
	before := time.Now()
	got := Real{}.Now()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Fatalf("Real.Now() = %v, want within [%v, %v]", got, before, after)
	}
}

func TestRealTimers(t *testing.T) {
	var clk Clock = Real{}
	tests := map[string]func(t *testing.T){
		"a due timer sends on its channel and then cannot be stopped": func(t *testing.T) {
			tm := clk.NewTimer(0)
			select {
			case <-tm.C():
			case <-time.After(time.Minute):
				t.Fatal("a timer of 0s did not fire within a minute")
			}
			if tm.Stop() {
				t.Fatal("Stop of a fired timer reported true")
			}
		},
		"a pending timer stops once": func(t *testing.T) {
			tm := clk.NewTimer(time.Hour)
			if !tm.Stop() {
				t.Fatal("first Stop of a pending timer reported false")
			}
			if tm.Stop() {
				t.Fatal("second Stop reported true")
			}
		},
		"AfterFunc calls its function and has no channel": func(t *testing.T) {
			called := make(chan struct{})
			tm := clk.AfterFunc(0, func() { close(called) })
			if tm.C() != nil {
				t.Fatal("an AfterFunc timer has a channel")
			}
			select {
			case <-called:
			case <-time.After(time.Minute):
				t.Fatal("AfterFunc(0) did not call f within a minute")
			}
		},
		"a stopped AfterFunc never calls its function": func(t *testing.T) {
			tm := clk.AfterFunc(time.Hour, func() { t.Error("f was called") })
			if !tm.Stop() {
				t.Fatal("Stop of a pending AfterFunc reported false")
			}
		},
	}
	for name, test := range tests {
		t.Run(name, test)
	}
}

// The wrapper around *time.Timer must not allocate: the Transport keeps a
// timer per attempt in a heap object (here: the package-level sinks).
func TestRealTimersAllocateNoMoreThanTheStandardLibrary(t *testing.T) {
	f := func() {}
	std := testing.AllocsPerRun(100, func() {
		stdTimer = time.NewTimer(time.Hour)
		stdTimer.Stop()
		stdTimer = time.AfterFunc(time.Hour, f)
		stdTimer.Stop()
	})
	ours := testing.AllocsPerRun(100, func() {
		timer = realClock.NewTimer(time.Hour)
		timer.Stop()
		timer = realClock.AfterFunc(time.Hour, f)
		timer.Stop()
	})
	if ours != std {
		t.Fatalf("Real timers: %v allocs per NewTimer+AfterFunc, the standard library %v", ours, std)
	}
}

var (
	realClock Clock = Real{}
	timer     Timer
	stdTimer  *time.Timer
)
