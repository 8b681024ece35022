// Package clock is the time source of packages retrypolicy and retryhttp: the
// three operations that retryhttp.Transport, Limits.Admit, Gate.Acquire and
// Pacer use, and nothing else, so that a program can inject a virtual clock
// (package clocktest) and neither package depends on a clock library.
// See docs/library.md#clocks.
package clock

import "time"

// Clock tells the time and makes timers. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has
	// passed (at once, on the next move of a virtual clock, if d <= 0).
	NewTimer(d time.Duration) Timer
	// AfterFunc returns a timer that calls f, on a goroutine of the clock's
	// choosing, once d has passed. Its C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending event of a Clock, as returned by NewTimer and AfterFunc.
type Timer interface {
	// C is the channel NewTimer's timer sends on (capacity 1); nil for
	// AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing and reports whether it was still
	// pending (false if it had fired or was stopped already).
	Stop() bool
}

// Real is the system clock: time.Now, time.NewTimer and time.AfterFunc. Its
// timers cost exactly what the standard library's do (the wrapper does not
// allocate). The zero value is ready to use.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns time.NewTimer(d).
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

// realTimer holds one pointer, so storing it in a Timer does not allocate.
type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
