package sidecar

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// A committed answer (past the 64 KiB hold) is counted once however it
// ends (docs/grpc.md#metrics): by its status when its trailers come, else
// as an attempt without a status and a call with the outcome the app was
// told.
func TestGRPCCommittedAnswersAreCountedOnceHoweverTheyEnd(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cancel bool   // the app cancels once it has read the first message
		series string // the call's and the attempt's series, once counted
	}{
		"an answer whose trailers came is counted by its status": {
			series: "attempt UNAVAILABLE 1, call not-retryable 1"},
		"an answer the app cancelled in the middle is counted canceled": {
			cancel: true, series: "attempt ambiguous 1, call canceled 1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newScriptedUpstream(t, func(_ int, st grpc.ServerStream) error {
				m := make([]byte, 100<<10)
				if err := st.SendMsg(&m); err != nil {
					return err
				}
				if tc.cancel {
					<-st.Context().Done()
					return st.Context().Err()
				}
				return grpcstatus.Error(codes.Unavailable, "after a message the app has")
			})
			pol, err := retrypolicy.Compile(retrypolicy.Config{Name: "up", Hosts: []string{u.addr}, MaxAttempts: 3,
				Deadline: 10 * time.Second, RetryOnGRPCStatus: []uint32{14},
				ReplayableMethods: []string{"/test.Retry/*"}, MaxReplayBodyBytes: 1 << 10,
				Backoff: retrypolicy.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: retrypolicy.JitterNone}})
			if err != nil {
				t.Fatal(err)
			}
			g := testForwarder(&grpcPolicyRetrier{})
			g.metrics = NewMetrics()
			cc := serveForwarder(t, u.addr, g, pol)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Retry/Call")
			if err != nil {
				t.Fatal(err)
			}
			m := []byte("x")
			_ = st.SendMsg(&m)
			_ = st.CloseSend()
			var in []byte
			if err := st.RecvMsg(&in); err != nil || len(in) != 100<<10 {
				t.Fatalf("the app read %d bytes, %v; want the first message, 102400 bytes", len(in), err)
			}
			if tc.cancel {
				cancel()
			} else if err := st.RecvMsg(&in); grpcstatus.Code(err) != codes.Unavailable {
				t.Fatalf("the app got %v; want UNAVAILABLE", err)
			}
			polltest.Until(t, 5*time.Second, func() error {
				if got := countedCalls(t, g.metrics); got != tc.series {
					return fmt.Errorf("counted %q; want %q", got, tc.series)
				}
				return nil
			})
		})
	}
}

// countedAs is the word and the label countedCalls lists a family by.
var countedAs = map[string][2]string{
	"retry_sidecar_attempts_total": {"attempt", "status"},
	"retry_sidecar_requests_total": {"call", "outcome"},
}

// countedCalls lists the attempts (by status) and the calls (by outcome)
// m counted.
func countedCalls(t *testing.T, m *Metrics) string {
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		kind, label := countedAs[f.GetName()][0], countedAs[f.GetName()][1]
		if kind == "" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && s.GetCounter().GetValue() > 0 {
					out = append(out, fmt.Sprintf("%s %s %v", kind, l.GetValue(), s.GetCounter().GetValue()))
				}
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
