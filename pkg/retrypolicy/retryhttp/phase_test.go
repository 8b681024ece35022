package retryhttp

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestTimeoutPhase(t *testing.T) {
	dialTimeout := &net.OpError{Op: "dial", Err: timeoutErr{}}
	tests := map[string]struct {
		err   error
		fired bool
		want  Phase
	}{
		"a dial that timed out is the connect phase":               {&PhaseError{Phase: PhaseConnect, Err: dialTimeout}, false, PhaseConnect},
		"an untagged dial timeout is the connect phase":            {dialTimeout, false, PhaseConnect},
		"the attempt's bound firing during the dial is connect":    {&PhaseError{Phase: PhaseConnect, Err: &net.OpError{Op: "dial", Err: context.Canceled}}, true, PhaseConnect},
		"a handshake that timed out is the tls phase":              {&PhaseError{Phase: PhaseTLS, Err: timeoutErr{}}, false, PhaseTLS},
		"the attempt's bound firing after the write is headers":    {context.Canceled, true, PhaseHeaders},
		"a refused dial is no timeout":                             {&PhaseError{Phase: PhaseConnect, Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, false, ""},
		"a reset after the write is no timeout":                    {errors.New("connection reset by peer"), false, ""},
		"a context deadline inside the client counts as its phase": {&PhaseError{Phase: PhaseConnect, Err: context.DeadlineExceeded}, false, PhaseConnect},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := timeoutPhase(tc.err, tc.fired); got != tc.want {
				t.Fatalf("timeoutPhase(%v, %v) = %q, want %q", tc.err, tc.fired, got, tc.want)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
