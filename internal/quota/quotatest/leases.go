// Package quotatest holds the lease table that both implementations of the
// store's arithmetic must pass: quota.Model in Go, and the Lua script of
// package redisstore against a real redis-server. One table, two runners:
// the script and the Model cannot drift apart.
package quotatest

import (
	"context"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// Start is the virtual time of every case's first lease.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Step is one operation of a case, After the one before: a lease and the
// reply it must get, or (Forget set) a namespace forgotten.
type Step struct {
	After  time.Duration
	Req    quota.LeaseRequest
	Want   quota.LeaseReply
	Forget string
}

// Case is a quota and the steps run on it.
type Case struct {
	Spec  quota.Spec
	Steps []Step
}

// Forgetter is a store that can drop a namespace's pods.
type Forgetter interface {
	Forget(ctx context.Context, spec quota.Spec, namespace string) error
}

const ms = time.Millisecond

// pod is a lease request of pod in namespace ns.
func pod(name, ns string, want int64, demand float64) quota.LeaseRequest {
	return quota.LeaseRequest{Pod: name, Namespace: ns, Want: want, Demand: demand}
}

func due(r quota.LeaseRequest, n int64) quota.LeaseRequest { r.Due = n; return r }

func slots(name string, ask, inUse int64) quota.LeaseRequest {
	return quota.LeaseRequest{Pod: name, Slots: ask, InUse: inUse}
}

// sent is the reply granting n send times of r1000 from first on, with the
// rate, fleet demand and pods the store saw.
func sent(n int64, first time.Duration, rate, fleet float64, pods int) quota.LeaseReply {
	return quota.LeaseReply{Granted: n, First: first, Spacing: ms, Lateness: 10 * ms, Rate: rate, FleetDemand: fleet, Pods: pods}
}

// The specs of the table: R 1000/s with burst 11, one send time a
// millisecond, good for 10 ms after its time, none in the past; conc is it
// with 3 slots. hold is a pacing hold's end.
var (
	r1000 = quota.Spec{Name: "t", RequestsPerSecond: 1000, Burst: 11}
	conc  = quota.Spec{Name: "t", RequestsPerSecond: 1000, Burst: 11, Concurrency: 3}
	hold  = Start.Add(30 * time.Second)
)

// Cases are the table.
func Cases() map[string]Case {
	return map[string]Case{
		"a pod alone gets its share for the next interval, lease after lease": {Spec: r1000, Steps: []Step{
			{Req: pod("a", "x", 500, 400), Want: sent(100, 0, 1000, 400, 1)},
			{After: 100 * ms, Req: pod("a", "x", 500, 400), Want: sent(100, 0, 1000, 400, 1)},
		}},
		"a namespace reporting absurd demand holds no other below its demand": {Spec: r1000, Steps: []Step{
			{Req: pod("a", "x", 1000, 1e12), Want: sent(100, 0, 1000, 1e9, 1)},
			{After: ms, Req: pod("b", "y", 301, 300), Want: sent(30, 99*ms, 300, 1e9+300, 2)},
			{After: 99 * ms, Req: pod("a", "x", 1000, 1e12), Want: sent(70, 30*ms, 700, 1e9+300, 2)},
		}},
		"the rate is divided across namespaces, then across the pods of each": {Spec: r1000, Steps: []Step{
			{Req: pod("a1", "x", 301, 1000), Want: sent(100, 0, 1000, 1000, 1)},
			{Req: pod("a2", "x", 301, 1000), Want: sent(50, 100*ms, 500, 2000, 2)},
			{Req: pod("b", "y", 301, 1000), Want: sent(50, 150*ms, 500, 3000, 3)},
			{After: 100 * ms, Req: pod("a1", "x", 301, 1000), Want: sent(25, 100*ms, 250, 3000, 3)},
		}},
		"demand that is not a number, or negative, counts as none": {Spec: r1000, Steps: []Step{
			{Req: pod("a", "x", 10, nan()), Want: sent(10, 0, 1000, 0, 1)},
			{After: ms, Req: pod("b", "y", 10, 600), Want: sent(10, 9*ms, 800, 600, 2)},
			{After: ms, Req: pod("a", "x", 10, -5), Want: sent(10, 18*ms, 200, 600, 2)},
		}},
		"a late lease gets its share for at most CatchUp of the time it missed": {Spec: r1000, Steps: []Step{
			{Req: pod("a1", "x", 301, 1000), Want: sent(100, 0, 1000, 1000, 1)},
			{Req: pod("a2", "x", 0, 1000), Want: quota.LeaseReply{Rate: 500, FleetDemand: 2000, Pods: 2}},
			{After: 500 * ms, Req: pod("a2", "x", 0, 1000), Want: quota.LeaseReply{Rate: 1000, FleetDemand: 1000, Pods: 2}},
			{After: 200 * ms, Req: pod("a1", "x", 301, 1000), Want: sent(200, 0, 500, 2000, 2)},
		}},
		"send times for attempts due now are placed in the past, within the tolerance": {
			Spec: quota.Spec{Name: "t", RequestsPerSecond: 1000, Burst: 500}, Steps: []Step{
				{Req: due(pod("a", "x", 10, 50), 10), Want: quota.LeaseReply{Granted: 10, First: -9 * ms, Spacing: ms,
					Lateness: 499 * ms, Rate: 1000, FleetDemand: 50, Pods: 1}},
				{After: time.Second, Req: due(pod("a", "x", 400, 50), 400), Want: quota.LeaseReply{Granted: 301,
					First: -299 * ms, Spacing: ms, Lateness: 499 * ms, Rate: 1000, FleetDemand: 50, Pods: 1}},
			}},
		"no send time is granted further ahead than MaxAhead": {
			Spec: quota.Spec{Name: "t", RequestsPerSecond: 100, Burst: 1}, Steps: []Step{
				{Req: pod("a", "x", 0, 100), Want: quota.LeaseReply{Rate: 100, FleetDemand: 100, Pods: 1}},
				{After: 300 * ms, Req: pod("a", "x", 30, 100), Want: quota.LeaseReply{Granted: 30, Spacing: 10 * ms,
					Lateness: ms, Rate: 100, FleetDemand: 100, Pods: 1}},
				{Req: pod("b", "y", 31, 100), Want: quota.LeaseReply{Granted: 1, First: 300 * ms, Spacing: 10 * ms,
					Lateness: ms, Rate: 50, FleetDemand: 200, Pods: 2}},
				{Req: pod("c", "z", 31, 100), Want: quota.LeaseReply{Rate: 100.0 / 3, FleetDemand: 300, Pods: 3}},
			}},
		"concurrency slots go to the pods that ask for them, max-min": {Spec: conc, Steps: []Step{
			{Req: slots("a", 0, 0), Want: quota.LeaseReply{Rate: 1000, Pods: 1}},
			{After: ms, Req: slots("b", 3, 0), Want: quota.LeaseReply{Slots: 3, Rate: 500, Pods: 2}},
			{After: ms, Req: slots("a", 2, 0), Want: quota.LeaseReply{Slots: 0, Rate: 500, Pods: 2}},
			{After: ms, Req: slots("b", 3, 1), Want: quota.LeaseReply{Slots: 2, Rate: 500, Pods: 2}},
			{After: ms, Req: slots("a", 2, 0), Want: quota.LeaseReply{Slots: 1, Rate: 500, Pods: 2}},
		}},
		"a pod asking for one slot gets it from one asking for every slot, max-min": {Spec: conc, Steps: []Step{
			{Req: slots("b", 3, 0), Want: quota.LeaseReply{Slots: 3, Rate: 1000, Pods: 1}},
			{After: ms, Req: slots("a", 1, 0), Want: quota.LeaseReply{Slots: 0, Rate: 500, Pods: 2}},
			{After: ms, Req: slots("b", 3, 0), Want: quota.LeaseReply{Slots: 2, Rate: 500, Pods: 2}},
			{After: ms, Req: slots("a", 1, 0), Want: quota.LeaseReply{Slots: 1, Rate: 500, Pods: 2}},
		}},
		"a pod not seen for the lease TTL is forgotten, and its slots with it": {Spec: conc, Steps: []Step{
			{Req: slots("b", 3, 3), Want: quota.LeaseReply{Slots: 3, Rate: 1000, Pods: 1}},
			{After: time.Second, Req: slots("a", 3, 0), Want: quota.LeaseReply{Slots: 0, Rate: 1000, Pods: 2}},
			{After: quota.LeaseTTL - time.Second, Req: slots("a", 3, 0), Want: quota.LeaseReply{Slots: 3, Rate: 1000, Pods: 1}},
		}},
		"a forgotten namespace's share goes to the others with their next lease": {Spec: r1000, Steps: []Step{
			{Req: pod("a", "x", 0, 1000), Want: quota.LeaseReply{Rate: 1000, FleetDemand: 1000, Pods: 1}},
			{After: ms, Req: pod("b", "y", 0, 1000), Want: quota.LeaseReply{Rate: 500, FleetDemand: 2000, Pods: 2}},
			{Forget: "x"},
			{After: ms, Req: pod("b", "y", 0, 1000), Want: quota.LeaseReply{Rate: 1000, FleetDemand: 1000, Pods: 1}},
		}},
		"a hold one pod saw reaches the others": {Spec: r1000, Steps: []Step{
			{Req: quota.LeaseRequest{Pod: "a", Hold: hold}, Want: quota.LeaseReply{Rate: 1000, Pods: 1, Hold: hold}},
			{After: ms, Req: pod("b", "x", 0, 0), Want: quota.LeaseReply{Rate: 500, Pods: 2, Hold: hold}},
		}},
	}
}

// Run runs every case on a store made by newStore on the case's virtual
// clock (a redis-server's script takes its now from it, not from TIME).
func Run(t *testing.T, newStore func(t *testing.T, clk *clocktest.Clock) quota.Store) {
	for name, tc := range Cases() {
		t.Run(name, func(t *testing.T) {
			clk := clocktest.NewClock(Start)
			s := newStore(t, clk)
			for i, st := range tc.Steps {
				clk.Advance(st.After)
				if st.Forget != "" {
					if err := s.(Forgetter).Forget(t.Context(), tc.Spec, st.Forget); err != nil {
						t.Fatalf("step %d: Forget: %v", i, err)
					}
					continue
				}
				got, err := s.Lease(t.Context(), tc.Spec, st.Req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want := st.Want
				if got.Hold.Equal(want.Hold) {
					got.Hold = want.Hold
				}
				if got != want {
					t.Errorf("step %d: lease of %s = %+v,\nwant %+v", i, st.Req.Pod, got, want)
				}
			}
		})
	}
}

func nan() float64 { var zero float64; return zero / zero }
