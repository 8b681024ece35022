package polltest

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestPace(t *testing.T) {
	tests := map[string]struct {
		timeout, want time.Duration
	}{
		"a short wait is asked every 5 ms":           {100 * time.Millisecond, 5 * time.Millisecond},
		"a one-second wait is asked every 5 ms":      {time.Second, 5 * time.Millisecond},
		"a two-second wait is asked every 10 ms":     {2 * time.Second, 10 * time.Millisecond},
		"a ten-second wait is asked every 50 ms":     {10 * time.Second, 50 * time.Millisecond},
		"a minute's wait is still asked every 50 ms": {time.Minute, 50 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Pace(tc.timeout); got != tc.want {
				t.Fatalf("Pace(%s) = %s, want %s", tc.timeout, got, tc.want)
			}
		})
	}
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Until(t, time.Second, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// TestUntilFailsWithTheLastError runs the failing wait on a recorder, so the
// failure is observed rather than failing this test.
func TestUntilFailsWithTheLastError(t *testing.T) {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		UntilEvery(rec, 20*time.Millisecond, 5*time.Millisecond, func() error {
			return errors.New("attempt failed")
		})
	}()
	<-done
	if want := "after 20ms: attempt failed"; rec.fatal != want {
		t.Fatalf("Fatalf message %q, want %q", rec.fatal, want)
	}
}

type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
