package retrygrpc

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/httpdate"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// call is one logical call: its attempts share the deadline and the replay
// verdict of its method.
type call struct {
	*interceptor
	method     string
	deadline   time.Time // the policy's or the caller's, the nearer, on clk
	replayable bool
	nested     bool
}

func (i *interceptor) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := &call{interceptor: i, method: method, replayable: i.p.GRPCMethodReplayable(method)}
	start := i.clk.Now()
	c.deadline = start.Add(i.p.Deadline())
	if d, ok := ctx.Deadline(); ok && start.Add(time.Until(d)).Before(c.deadline) {
		c.deadline = start.Add(time.Until(d))
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(keyAttempt)) > 0 {
		c.nested = true
	}
	rep, err := c.run(ctx, req, reply, cc, invoker, opts)
	if !rep.NotBefore.IsZero() {
		rep.NotBefore = httpdate.Ceil(rep.NotBefore) // never earlier than the server allowed
	}
	report(opts, rep)
	return err
}

// run makes the attempts: admit, send, decide, wait.
func (c *call) run(ctx context.Context, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts []grpc.CallOption) (Report, error) {
	lim := c.p.Limits()
	var trailer metadata.MD
	aopts := slices.Concat(opts, []grpc.CallOption{grpc.Trailer(&trailer)})
	for n := 1; ; n++ {
		tk, rep, err := c.admit(ctx, lim, n)
		if err != nil {
			return rep, err
		}
		if n == 1 {
			lim.Budget().RecordFirstAt(c.clk.Now())
		}
		trailer = nil
		timedOut, err := c.attempt(ctx, n, req, reply, cc, invoker, aopts)
		received := c.clk.Now()
		tk.Release(received)
		a, stop := c.assess(ctx, n, err, timedOut, trailer)
		if stop != "" {
			return Report{Attempts: n, Outcome: stop}, err
		}
		d := c.p.DecideAt(received, a)
		if d.Action == retrypolicy.Retry && !lim.Budget().TryRetryAt(received) {
			d = retrypolicy.Decision{Action: retrypolicy.Stop, Outcome: retrypolicy.OutcomeBudgetExhausted}
		}
		if d.Action != retrypolicy.Retry {
			return Report{Attempts: n, Outcome: d.Outcome, NotBefore: d.NotBefore}, err
		}
		if werr := c.sleep(ctx, received.Add(d.Delay).Sub(c.clk.Now())); werr != nil {
			return Report{Attempts: n, Outcome: retrypolicy.OutcomeCanceled}, status.FromContextError(werr).Err()
		}
	}
}

// admit clears attempt n: the caller is still there, the deadline leaves
// room, admission gave a slot in time.
func (c *call) admit(ctx context.Context, lim *limits.State, n int) (limits.Ticket, Report, error) {
	if err := ctx.Err(); err != nil {
		return limits.Ticket{}, Report{Attempts: n - 1, Outcome: retrypolicy.OutcomeCanceled}, status.FromContextError(err).Err()
	}
	now := c.clk.Now()
	if !now.Before(c.deadline) {
		return limits.Ticket{}, Report{Attempts: n - 1, Outcome: retrypolicy.OutcomeDeadlineExceeded, NotBefore: now},
			status.Error(codes.DeadlineExceeded, "retrygrpc: the deadline passed before attempt "+strconv.Itoa(n))
	}
	tk, wait, err := lim.Admit(ctx, c.clk, c.sleep, c.deadline.Sub(now)-c.p.Reserve())
	switch {
	case err == nil:
		return tk, Report{}, nil
	case errors.Is(err, limits.ErrShed):
		return tk, Report{Attempts: n - 1, Outcome: retrypolicy.OutcomeShed, NotBefore: c.clk.Now().Add(wait)},
			status.Error(codes.Unavailable, "retrygrpc: shed by the upstream's admission limits")
	case errors.Is(err, limits.ErrQuotaDenied):
		return tk, Report{Attempts: n - 1, Outcome: retrypolicy.OutcomeDeferred, NotBefore: c.clk.Now().Add(wait)},
			status.Error(codes.Unavailable, "retrygrpc: the upstream's quota allows no attempt now")
	}
	return tk, Report{Attempts: n - 1, Outcome: retrypolicy.OutcomeCanceled}, status.FromContextError(err).Err()
}

// attempt sends attempt n with the time left (or perTryTimeout, if shorter)
// as its deadline, which grpc-go sends as grpc-timeout, and its number.
// timedOut says which of the two ended it, if one did.
func (c *call) attempt(ctx context.Context, n int, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts []grpc.CallOption) (timedOut timeout, err error) {
	left, bound := c.deadline.Sub(c.clk.Now()), timedOutDeadline
	if pt := c.p.PerTryTimeout(); pt > 0 && pt < left {
		left, bound = pt, timedOutPerTry
	}
	actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, keyAttempt, strconv.Itoa(n)), left)
	defer cancel()
	err = invoker(actx, c.method, req, reply, cc, opts...)
	if err != nil && ctx.Err() == nil && (errors.Is(actx.Err(), context.DeadlineExceeded) || endedByServerTimer(actx, err)) {
		return bound, err
	}
	return notTimedOut, err
}

// timerSlack is how much earlier than the attempt's own timer the server's
// may end it: the server counts the grpc-timeout it was sent from when the
// call arrived, and its RST_STREAM can overtake the client's timer.
const timerSlack = 10 * time.Millisecond

// endedByServerTimer reports a DEADLINE_EXCEEDED that came as the attempt's
// deadline was due: the server's timer for it, not the server's answer.
func endedByServerTimer(actx context.Context, err error) bool {
	d, ok := actx.Deadline()
	return ok && status.Code(err) == codes.DeadlineExceeded && time.Until(d) <= timerSlack
}

// timeout is the bound that ended an attempt, if one did.
type timeout uint8

const (
	notTimedOut      timeout = iota
	timedOutPerTry           // perTryTimeout: the server may have acted, retried if replayable
	timedOutDeadline         // the call's deadline: nothing more fits
)

// assess describes attempt n for DecideAt, or says the call ends here
// (stop): the caller left, or the deadline ended the attempt.
func (c *call) assess(ctx context.Context, n int, err error, timedOut timeout, trailer metadata.MD) (a retrypolicy.Attempt, stop retrypolicy.Outcome) {
	a = retrypolicy.Attempt{Number: n, GRPC: true, Replayable: c.replayable, Rewindable: true,
		Nested: c.nested, Deadline: c.deadline, Random: c.random()}
	if err == nil {
		return a, ""
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), timedOut == timedOutDeadline:
		return a, retrypolicy.OutcomeDeadlineExceeded
	case ctx.Err() != nil:
		return a, retrypolicy.OutcomeCanceled
	case timedOut == timedOutPerTry:
		a.Err = retrypolicy.Ambiguous
		return a, ""
	}
	a.GRPCStatus = uint32(status.Code(err))
	if v := trailer.Get(pushbackKey); len(v) > 0 {
		if d, perr := retrypolicy.ParseGRPCPushback(v[0]); perr != nil {
			a.NoRetry = true
		} else {
			a.Hint, a.HasHint = retrypolicy.Hint{Delay: d}, true
		}
	}
	return a, ""
}

// sleep waits d on the clock, or until ctx ends.
func (c *call) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// report gives rep to the caller's ReportTo and grpc.Trailer options.
func report(opts []grpc.CallOption, rep Report) {
	for _, o := range opts {
		switch o := o.(type) {
		case reportOption:
			*o.r = rep
		case grpc.TrailerCallOption:
			if *o.TrailerAddr == nil {
				*o.TrailerAddr = metadata.MD{}
			}
			o.TrailerAddr.Set(keyAttempts, strconv.Itoa(rep.Attempts))
			o.TrailerAddr.Set(keyOutcome, string(rep.Outcome))
			if !rep.NotBefore.IsZero() {
				o.TrailerAddr.Set(keyNotBefore, httpdate.Format(rep.NotBefore))
			}
		}
	}
}
