// Package polltest waits, in tests, for a state that no signal announces (a
// metric, an API object, a connection count): it asks again at a steady pace
// and fails the test with the last answer when the time is up. Where a channel
// or a callback can say that the state was reached, wait on that instead.
//
//	polltest.Until(t, 10*time.Second, func() error {
//		return c.Get(ctx, key, &cm) // nil once the ConfigMap exists
//	})
package polltest

import (
	"errors"
	"testing"
	"time"
)

// Until calls cond until it returns nil, at Pace(timeout); after timeout it
// fails t with cond's last error.
func Until(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	UntilEvery(t, timeout, Pace(timeout), cond)
}

// UntilTrue calls cond until it returns true, at Pace(timeout); after timeout
// it fails t.
func UntilTrue(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	UntilEvery(t, timeout, Pace(timeout), func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("condition not met")

// UntilEvery calls cond every pace until it returns nil; after timeout it
// fails t with cond's last error. For a pace that matters: a cond that is
// expensive to ask (slower), or a test that times how soon a state is reached
// (faster).
func UntilEvery(t testing.TB, timeout, pace time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(pace)
	}
}

// Pace is the default pace for a wait of timeout: a two-hundredth of it,
// between 5 ms and 50 ms (1 s: 5 ms; 10 s and more: 50 ms).
func Pace(timeout time.Duration) time.Duration {
	return min(max(timeout/200, 5*time.Millisecond), 50*time.Millisecond)
}
