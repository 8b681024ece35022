package retrysim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retrygrpc"
)

// GRPCInput is one unary gRPC call and the upstream's scripted answers
// (Responses of gRPC status names).
type GRPCInput struct {
	Policy *retrypolicy.Policy
	// Method is the call's full method, "/package.Service/Method" (its :path).
	Method string
	// Metadata the app sends with the call; keys are lower-cased as gRPC's
	// are. An x-retry-attempt makes the call nested (never multiplied).
	Metadata http.Header
	// Responses are the upstream's answers to attempts 1, 2, …
	Responses []Response
	// Seed seeds the jitter; Start is the virtual time of the call.
	Seed  uint64
	Start time.Time
}

// GRPCResult is the timeline of a gRPC call and what the app got back.
type GRPCResult struct {
	Upstream string `json:"upstream"`
	// Authority is the :authority of the call (the policy's first host).
	Authority string `json:"authority"`
	Method    string `json:"method"`
	// Replayable: the method matches a gRPC pattern of replayableMethods.
	Replayable bool `json:"replayable"`
	// Nested: the app's call carried x-retry-attempt from another retrying
	// layer, so it gets one attempt (never multiplied).
	Nested   bool   `json:"nested,omitempty"`
	Seed     uint64 `json:"seed"`
	Start    string `json:"start"`
	Attempts []Step `json:"attempts"`
	Outcome  string `json:"outcome"`
	// Status is the grpc-status the app gets, by name; Trailers are the
	// retry trailers with it (x-retry-*) and the last answer's pushback.
	Status   string            `json:"status"`
	Trailers map[string]string `json:"trailers"`
	Duration string            `json:"duration"`
	Unused   int               `json:"unusedResponses,omitempty"`
}

// SimulateGRPC makes one unary call through retrygrpc's interceptor, which
// makes the sidecar's gRPC decisions (Policy.DecideAt with the call's
// status, method and grpc-retry-pushback-ms, the budget and admission per
// attempt; docs/grpc.md), on a virtual clock, against an upstream that
// answers attempt n with in.Responses[n-1]. Each attempt's decision is then
// asked again of DecideAt, which is pure, to split its wait from admission
// and to say why.
func SimulateGRPC(in GRPCInput) (GRPCResult, error) {
	clk := &sleepClock{clocktest.NewClock(in.Start)}
	rng := rand.New(rand.NewPCG(in.Seed, in.Seed^0x9e3779b97f4a7c15))
	var draws []float64
	random := func() float64 { u := rng.Float64(); draws = append(draws, u); return u }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md := metadata.MD{}
	for k, vs := range in.Metadata {
		md.Append(strings.ToLower(k), vs...)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	up := &grpcScript{clk: clk, responses: in.Responses, abort: cancel}
	var rep retrygrpc.Report
	trailer := metadata.MD{}
	call := retrygrpc.UnaryClientInterceptor(in.Policy, retrygrpc.WithClock(clk), retrygrpc.WithRandom(random))
	err := call(ctx, in.Method, nil, nil, nil, up.invoke, retrygrpc.ReportTo(&rep), grpc.Trailer(&trailer))
	if up.ranOut {
		return GRPCResult{}, fmt.Errorf("--responses: %w: the policy made attempt %d; add what the upstream answers next",
			ErrRanOut, len(in.Responses)+1)
	}
	res := GRPCResult{
		Upstream: in.Policy.Name(), Authority: exampleHost(in.Policy.Config().Hosts), Method: in.Method,
		Replayable: in.Policy.GRPCMethodReplayable(in.Method), Seed: in.Seed,
		Start: in.Start.UTC().Format(time.RFC3339), Outcome: string(rep.Outcome),
		Status: codeName(status.Code(err)), Trailers: map[string]string{}, Unused: len(in.Responses) - len(up.sent),
		Duration: clk.Now().Sub(in.Start).String(),
	}
	for k, v := range trailer {
		res.Trailers[k] = strings.Join(v, ", ")
	}
	res.Nested = len(md.Get("x-retry-attempt")) > 0
	tl := timeline{p: in.Policy, start: in.Start, end: clk.Now(), method: in.Method, nested: res.Nested}
	res.Attempts = tl.steps(up.sent, draws, rep)
	return res, nil
}

// codeName is the canonical name of a gRPC status code.
func codeName(c codes.Code) string {
	if c == codes.OK {
		return "OK"
	}
	return string(v1alpha1.GRPCStatusCodeOf(uint32(c)))
}

// SortedTrailers returns the trailer names of res in order.
func (res GRPCResult) SortedTrailers() []string {
	keys := make([]string, 0, len(res.Trailers))
	for k := range res.Trailers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sleepClock is a virtual clock on which a wait is the clock moving: a
// timer moves the clock to its time and has fired when it is returned. The
// call is made on one goroutine, so it cannot wait any other way; the
// timers of AfterFunc (the pacer's) fire as the clock moves past them.
type sleepClock struct{ *clocktest.Clock }

func (c *sleepClock) NewTimer(d time.Duration) clock.Timer {
	if d > 0 {
		c.Advance(d)
	}
	t := firedTimer(make(chan time.Time, 1))
	t <- c.Now()
	return t
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time { return t }
func (firedTimer) Stop() bool            { return false }

// grpcScript is the simulated upstream of a gRPC call.
type grpcScript struct {
	clk       *sleepClock
	responses []Response
	sent      []sentAttempt
	abort     context.CancelFunc
	ranOut    bool
}

// sentAttempt is an attempt the upstream answered: when, and with what.
type sentAttempt struct {
	at   time.Time
	resp Response
}

// invoke answers the next attempt with the next scripted status, and its
// pushback in the trailers.
func (s *grpcScript) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	if len(s.sent) >= len(s.responses) {
		// The script ended: the caller goes away; SimulateGRPC reports it.
		s.ranOut = true
		s.abort()
		return status.FromContextError(ctx.Err()).Err()
	}
	r := s.responses[len(s.sent)]
	s.sent = append(s.sent, sentAttempt{at: s.clk.Now(), resp: r})
	for _, o := range opts {
		if t, ok := o.(grpc.TrailerCallOption); ok {
			*t.TrailerAddr = metadata.MD{}
			if r.Pushback != "" {
				t.TrailerAddr.Set("grpc-retry-pushback-ms", r.Pushback)
			}
		}
	}
	n, _ := v1alpha1.GRPCStatusCode(r.GRPCStatus).Number()
	if n == 0 {
		return nil
	}
	return status.Error(codes.Code(n), "simulated "+r.GRPCStatus)
}

// timeline turns what the upstream saw and the call's report into steps.
type timeline struct {
	p      *retrypolicy.Policy
	start  time.Time
	end    time.Time
	method string
	nested bool
}

// steps describes each attempt sent (draws[i] is the number attempt i+1
// drew for its jitter) and, when admission refused an attempt, that one
// as "(not sent)".
func (tl timeline) steps(sent []sentAttempt, draws []float64, rep retrygrpc.Report) []Step {
	steps := []Step{}
	ready := tl.start // when the next attempt could have gone without admission
	for i, s := range sent {
		st := Step{N: i + 1, Response: s.resp.String(), at: s.at.Sub(tl.start)}
		st.At = st.at.String()
		if s.at.After(ready) {
			st.Admission = s.at.Sub(ready).String()
		}
		a := tl.attempt(&st, s, draws[min(i, len(draws)-1)])
		d := tl.p.DecideAt(s.at, a)
		last := i == len(sent)-1
		if d.Action == retrypolicy.Retry && (!last || rep.Outcome != retrypolicy.OutcomeBudgetExhausted) {
			tl.retried(&st, a, d)
			ready = s.at.Add(d.Delay)
			steps = append(steps, st)
			continue
		}
		st.Decision, st.Outcome = d.Action.String(), string(rep.Outcome)
		if d.Action == retrypolicy.Retry {
			st.Decision = retrypolicy.Stop.String() // the budget allowed no retry
		}
		if !d.NotBefore.IsZero() {
			st.NotBefore = d.NotBefore.Sub(tl.start).String()
		}
		return append(steps, st)
	}
	// Admission refused the next attempt, or the deadline passed before it.
	st := Step{N: len(sent) + 1, Response: "(not sent)", Decision: retrypolicy.Stop.String(),
		Outcome: string(rep.Outcome), At: tl.end.Sub(tl.start).String()}
	if !rep.NotBefore.IsZero() {
		st.NotBefore = rep.NotBefore.Sub(tl.start).String()
	}
	return append(steps, st)
}

// attempt is sent attempt s as retrygrpc gives it to DecideAt; it notes the
// pushback in st.
func (tl timeline) attempt(st *Step, s sentAttempt, u float64) retrypolicy.Attempt {
	code, _ := v1alpha1.GRPCStatusCode(s.resp.GRPCStatus).Number()
	a := retrypolicy.Attempt{Number: st.N, GRPC: true, GRPCStatus: code, Rewindable: true, Nested: tl.nested,
		Replayable: tl.p.GRPCMethodReplayable(tl.method), Deadline: tl.start.Add(tl.p.Deadline()), Random: u}
	if s.resp.Pushback == "" {
		return a
	}
	d, err := retrypolicy.ParseGRPCPushback(s.resp.Pushback)
	var pe *retrypolicy.ParseError
	if errors.As(err, &pe) {
		a.NoRetry, st.PushbackReason = true, pe.Reason
		return a
	}
	a.Hint, a.HasHint, st.Pushback = retrypolicy.Hint{Delay: d}, true, d.String()
	return a
}

// retried fills the step of an attempt DecideAt retried after d.Delay:
// the local backoff, and which of it and the pushback set the wait.
func (tl timeline) retried(st *Step, a retrypolicy.Attempt, d retrypolicy.Decision) {
	local := tl.p.Config().Backoff.Delay(a.Number-1, a.Random)
	st.Decision, st.Wait, st.Backoff, st.WaitBy = retrypolicy.Retry.String(), d.Delay.String(), local.String(), "backoff"
	st.wait = d.Delay
	if a.HasHint && (d.Delay > local || a.Hint.Delay >= local) {
		st.WaitBy = "pushback"
	}
}
