package retrysim

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// fleet is the pods of a rehearsal: each its own compiled policy (its own
// budget, limiter, gate) and, with a shared quota, its own quota client, all
// leasing from one quota.Model on the virtual clock.
type fleet struct {
	pods    []*fleetPod
	skew    [2]int
	clients []*quota.Client
}

type fleetPod struct {
	pol               *retrypolicy.Policy
	requests, workers int
	next              int // requests started; only the running proc touches it
}

func newFleet(in RehearseInput, s *sched) (*fleet, error) {
	n := max(in.Pods, 1)
	f := &fleet{skew: in.Skew}
	if f.skew == [2]int{} {
		f.skew = [2]int{1, 1}
	}
	if f.skew[0] < 1 || f.skew[1] < 1 {
		return nil, fmt.Errorf("retrysim: skew %d:%d: both shares must be >= 1", f.skew[0], f.skew[1])
	}
	weights := f.skew[0] + (n-1)*f.skew[1]
	store := quota.NewModel(s.clk)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	left, workers := in.Requests, 0
	for i := range n {
		w := f.skew[1]
		if i == 0 {
			w = f.skew[0]
		}
		cfg := in.Policy.Config()
		if in.SharedQuota != nil {
			// The pods are replicas in one namespace: the quota divides the
			// rate among them by their demand.
			c := quota.New(*in.SharedQuota, store, s.clk, quota.Pod{Name: fmt.Sprintf("pod-%d", i+1)}, log, quota.Observer{})
			f.clients = append(f.clients, c)
			cfg.Quota = c
		} else if r := cfg.RateLimit; r != nil && n > 1 {
			// Today's split, as the manager renders it (policyset.PodShare, PodBurst).
			cfg.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: r.RequestsPerSecond / float64(n),
				Burst: max(1, (r.Burst+n-1)/n)}
		}
		// A fresh compile: fresh budget, limiter and gate for every pod.
		pol, err := retrypolicy.Compile(cfg)
		if err != nil {
			return nil, err
		}
		fp := &fleetPod{pol: pol, requests: in.Requests * w / weights, workers: max(1, in.Concurrency*w/weights)}
		left -= fp.requests
		workers += fp.workers
		f.pods = append(f.pods, fp)
		if g := pol.Limits().Gate(); g != nil {
			s.gates = append(s.gates, g)
		}
		if q := cfg.Quota; q != nil && q.Slots() != nil {
			s.gates = append(s.gates, q.Slots())
		}
	}
	f.pods[0].requests += left // the rounding goes to the busy pod
	for _, c := range f.clients {
		_ = c.Start()
	}
	return f, nil
}

// close ends the quota clients' lease operations, so the virtual clock runs
// out of timers when the last request ends.
func (f *fleet) close() {
	for _, c := range f.clients {
		c.Close()
	}
	f.clients = nil
}
