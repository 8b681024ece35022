package manager

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// PatientDial returns a dial function for the manager's API client that
// waits out an API server that is away — connection refused, no route, a
// dial timeout — trying again every `every` for up to `within`, instead of
// failing at once.
//
// Why: client-go's informers back off between failed list-and-watch rounds,
// 800 ms doubling to 30 s (jittered up to twice that), and a restart of the
// API server makes every round fail at once, many times over. Measured on the
// local cluster: the first edit after an API server restart was rendered
// 1.4–17.2 s later (docs/operations.md#what-survives-a-fault). A round that
// waits in the dial instead does not fail: it lists the moment the API server
// listens again, and the backoff stays at its first step.
//
// returned, if not nil, is called when a dial that found the API server away
// connects: a restarted API server answers every watch at an older
// resourceVersion with 410 Expired, so each informer lists again after a
// step of that backoff all the same (Terms.Refresh is the answer).
func PatientDial(d *net.Dialer, every, within time.Duration, returned func()) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		deadline := time.Now().Add(within)
		for waited := false; ; waited = true {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil && waited && returned != nil {
				returned()
			}
			if err == nil || !away(err) || time.Now().Add(every).After(deadline) {
				return conn, err
			}
			t := time.NewTimer(every)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
	}
}

// away reports whether err says the API server is not there now (it may be
// soon), as opposed to a dial that cannot work (a bad address, ctx ended).
func away(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded))
}
