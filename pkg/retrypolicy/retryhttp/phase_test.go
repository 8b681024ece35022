package retryhttp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
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

func TestClassify(t *testing.T) {
	handshakeCut := &PhaseError{Phase: PhaseTLS, Err: &net.OpError{Op: "dial", Err: context.DeadlineExceeded}}
	tests := map[string]struct {
		err      error
		fired    bound
		canceled bool
		want     retrypolicy.ErrorClass
	}{
		"a handshake cut by the connect timeout is a connect failure":   {handshakeCut, firedNone, false, retrypolicy.ConnectFailure},
		"a handshake cut by perTryTimeout is a connect failure":         {handshakeCut, firedPerTry, false, retrypolicy.ConnectFailure},
		"a handshake cut by the deadline is a connect failure":          {handshakeCut, firedDeadline, false, retrypolicy.ConnectFailure},
		"a dial cut by perTryTimeout is a connect failure":              {&PhaseError{Phase: PhaseConnect, Err: context.Canceled}, firedPerTry, false, retrypolicy.ConnectFailure},
		"an untagged dial error is a connect failure":                   {&net.OpError{Op: "dial", Err: errors.New("connection refused")}, firedNone, false, retrypolicy.ConnectFailure},
		"a DNS failure is a connect failure":                            {&net.DNSError{Err: "no such host", IsNotFound: true}, firedNone, false, retrypolicy.ConnectFailure},
		"perTryTimeout after the write is ambiguous":                    {context.Canceled, firedPerTry, false, retrypolicy.Ambiguous},
		"a reset after the write is ambiguous":                          {errors.New("connection reset by peer"), firedNone, false, retrypolicy.Ambiguous},
		"a certificate that does not verify is untrusted":               {&PhaseError{Phase: PhaseConnect, Err: ErrUntrustedCertificate}, firedNone, false, retrypolicy.Untrusted},
		"a malformed response is malformed":                             {ErrMalformedResponse, firedNone, false, retrypolicy.Malformed},
		"the caller gone during the handshake is canceled, not retried": {handshakeCut, firedNone, true, retrypolicy.Canceled},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.canceled {
				cancel()
			}
			c := &call{firedWhy: tc.fired}
			if got := c.classify(ctx, tc.err); got != tc.want {
				t.Fatalf("classify(%v) with %v fired = %v, want %v", tc.err, tc.fired, got, tc.want)
			}
		})
	}
}

func TestDrainCountsInsideTheWait(t *testing.T) {
	const reserve = 100 * time.Millisecond
	received := now
	tests := map[string]struct {
		left           time.Duration // deadline − receipt
		delay, drained time.Duration // the wait decided at receipt; the drain's length
		wantBound      time.Duration // what a drain starting at receipt may take
		wantLeft       time.Duration // the wait left once drained
	}{
		"a drain shorter than the wait is taken from it":              {3 * time.Second, 2 * time.Second, time.Second, time.Second, time.Second},
		"a drain longer than the wait delays the retry to its end":    {3 * time.Second, 10 * time.Millisecond, time.Second, time.Second, 0},
		"a drain that took nothing leaves the whole wait":             {3 * time.Second, 2 * time.Second, 0, time.Second, 2 * time.Second},
		"near the deadline the drain stops short of the reserve":      {600 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 0},
		"with only the reserve left there is no time to drain at all": {reserve, 0, 0, 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := drainBound(received, received.Add(tc.left), reserve); got != tc.wantBound {
				t.Errorf("drainBound = %v, want %v", got, tc.wantBound)
			}
			if got := waitLeft(received, tc.delay, received.Add(tc.drained)); got != tc.wantLeft {
				t.Errorf("waitLeft = %v, want %v", got, tc.wantLeft)
			}
		})
	}
}
