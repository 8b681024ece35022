package retrysim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// RehearseInput describes a rehearsal: Requests logical GETs sent by
// Concurrency workers (each sends its next request when the previous one
// ended) through one sidecar with Policy, to an upstream that admits Quota
// requests per rolling QuotaWindow and answers 429 with Retry-After beyond it.
type RehearseInput struct {
	Policy      *retrypolicy.Policy
	Requests    int
	Quota       int
	QuotaWindow time.Duration
	Concurrency int
	// Latency is the time the upstream takes for every answer, 200 or 429.
	Latency time.Duration
	Seed    uint64
	Start   time.Time
	// Pods is the number of sidecars the requests go through (0 or 1: one).
	// Pod 1 gets Skew[0] shares of the requests and workers, every other pod
	// Skew[1] (0 0: even).
	Pods int
	Skew [2]int
	// SharedQuota, if set, is the fleet-wide quota of the policy's upstream
	// (its quotaRef): every pod leases from one store on the virtual clock with
	// the sidecar's own client (internal/quota). Without it, several pods each
	// get rateLimit ÷ Pods, as the manager renders it today.
	SharedQuota *quota.Spec
}

// Spacing summarises the gaps between consecutive attempt starts at the upstream.
type Spacing struct {
	Min string `json:"min"`
	P50 string `json:"p50"`
	Max string `json:"max"`
}

// Plan is what the numbers should be if the pacing works: requests at the
// policy's rateLimit (or, without one, at the quota), each busy for Latency.
type Plan struct {
	// RequestsPerMinute is the pace: rateLimit, else the quota.
	RequestsPerMinute float64 `json:"requestsPerMinute"`
	// MinDuration is Requests at that pace, latency and retries excluded.
	MinDuration string `json:"minDuration"`
	// MeanConcurrency is pace × latency (Little's law).
	MeanConcurrency float64 `json:"meanConcurrency"`
}

// RehearseResult is what happened. Times are Go duration strings of virtual time.
type RehearseResult struct {
	Upstream    string `json:"upstream"`
	Requests    int    `json:"requests"`
	Quota       string `json:"quota"`
	Concurrency int    `json:"concurrency"`
	Latency     string `json:"latency"`
	Seed        uint64 `json:"seed"`
	// Pods and Skew are the fleet (omitted for one pod); SharedQuota names the
	// quota the pods lease from, "" for the per-pod split of rateLimit.
	Pods        int    `json:"pods,omitempty"`
	Skew        string `json:"skew,omitempty"`
	SharedQuota string `json:"sharedQuota,omitempty"`
	Plan        Plan   `json:"plan"`

	// FirstAttempts and Retries are transmissions to the upstream.
	FirstAttempts int `json:"firstAttempts"`
	Retries       int `json:"retries"`
	// Successes are logical requests with outcome success; FinalErrors counts the
	// others by outcome.
	Successes   int            `json:"successes"`
	FinalErrors map[string]int `json:"finalErrors"`
	// Status429 counts 429 answers of the upstream (every attempt).
	Status429    int     `json:"status429"`
	StartSpacing Spacing `json:"startSpacing"`
	// PeakConcurrency and MeanConcurrency are attempts in flight at the upstream
	// (mean: time-weighted over VirtualDuration).
	PeakConcurrency int     `json:"peakConcurrency"`
	MeanConcurrency float64 `json:"meanConcurrency"`
	VirtualDuration string  `json:"virtualDuration"`

	virtual time.Duration
}

// VirtualDurationValue is VirtualDuration as a time.Duration.
func (r RehearseResult) VirtualDurationValue() time.Duration { return r.virtual }

// ParseQuota reads "120/m": a count per second (s), minute (m) or hour (h).
func ParseQuota(s string) (int, time.Duration, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	count, err := strconv.Atoi(n)
	if !ok || err != nil || count < 1 {
		return 0, 0, fmt.Errorf("--quota %q: want COUNT/UNIT with COUNT >= 1 and UNIT s, m or h, e.g. 120/m", s)
	}
	switch unit {
	case "s":
		return count, time.Second, nil
	case "m", "min":
		return count, time.Minute, nil
	case "h":
		return count, time.Hour, nil
	}
	return 0, 0, fmt.Errorf("--quota %q: unit must be s, m or h (e.g. 120/m)", s)
}

// Rehearse runs the rehearsal on a virtual clock through the real
// retryhttp.Transport (decisions, budget, rate limiter, concurrency gate) of
// every pod, and the real quota client when the upstream has a SharedQuota.
// Exactly one simulated goroutine runs at any time, so a seed gives one result.
func Rehearse(in RehearseInput) (RehearseResult, error) {
	if in.Requests < 1 || in.Concurrency < 1 || in.Quota < 1 || in.QuotaWindow <= 0 || in.Latency < 0 || in.Pods < 0 {
		return RehearseResult{}, errors.New("retrysim: Requests, Concurrency, Quota >= 1, QuotaWindow > 0, Latency >= 0, Pods >= 0")
	}
	s := newSched(in.Start)
	f, err := newFleet(in, s)
	if err != nil {
		return RehearseResult{}, err
	}
	up := &quotaUpstream{s: s, quota: in.Quota, window: in.QuotaWindow, latency: in.Latency}
	rng := rand.New(rand.NewPCG(in.Seed, in.Seed^0x9e3779b97f4a7c15))
	pol := f.pods[0].pol
	url := "http://" + exampleHost(pol.Config().Hosts) + "/"
	res := RehearseResult{
		Upstream: pol.Name(), Requests: in.Requests, Concurrency: in.Concurrency,
		Quota: fmt.Sprintf("%d/%s", in.Quota, shortUnit(in.QuotaWindow)), Latency: in.Latency.String(),
		Seed: in.Seed, FinalErrors: map[string]int{},
	}
	if len(f.pods) > 1 {
		res.Pods, res.Skew = len(f.pods), fmt.Sprintf("%d:%d", f.skew[0], f.skew[1])
	}
	if in.SharedQuota != nil {
		res.SharedQuota = in.SharedQuota.Name
	}
	var done int // requests ended; only the running proc touches it
	var end time.Time
	for _, fp := range f.pods {
		for range fp.workers {
			p := s.spawn()
			rt := &retryhttp.Transport{
				Inner: up, Route: retryhttp.Static(fp.pol), Clock: procClock{s, p},
				Sleep:  func(ctx context.Context, d time.Duration) error { return s.sleep(p, ctx, d) },
				Random: rng.Float64,
			}
			go s.run(p, func() {
				for fp.next < fp.requests {
					fp.next++
					ctx := context.WithValue(context.Background(), procKey{}, p)
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					outcome := roundTrip(rt, req)
					done++
					if outcome == string(retrypolicy.OutcomeSuccess) {
						res.Successes++
					} else {
						res.FinalErrors[outcome]++
					}
					end = s.clk.Now()
					if done == in.Requests {
						f.close() // the quota clients' lease timers end too
					}
				}
			})
		}
	}
	s.loop()
	if done != in.Requests {
		f.close()
		return RehearseResult{}, fmt.Errorf("retrysim: the rehearsal stalled after %d of %d requests", done, in.Requests)
	}

	res.measure(in, up, in.Policy.Config(), end)
	return res, nil
}

// measure fills in what the rehearsal measured: the upstream's counts, the
// virtual duration (the last request ended at end), concurrency and spacing,
// and the plan the policy's rate limit (else the quota) implies.
func (res *RehearseResult) measure(in RehearseInput, up *quotaUpstream, cfg retrypolicy.Config, end time.Time) {
	res.FirstAttempts, res.Retries, res.Status429 = up.firsts, up.retries, up.status429
	res.virtual = end.Sub(in.Start)
	res.VirtualDuration = res.virtual.String()
	res.PeakConcurrency = up.peak
	if res.virtual > 0 {
		res.MeanConcurrency = round2(up.area / res.virtual.Seconds())
	}
	res.StartSpacing = spacing(up.starts)
	perMinute := float64(in.Quota) * float64(time.Minute) / float64(in.QuotaWindow)
	if r := cfg.RateLimit; r != nil {
		perMinute = r.RequestsPerSecond * 60
	}
	if q := in.SharedQuota; q != nil {
		perMinute = q.RequestsPerSecond * 60
	}
	res.Plan = Plan{
		RequestsPerMinute: round2(perMinute),
		MinDuration:       time.Duration(float64(in.Requests) / perMinute * float64(time.Minute)).Round(time.Millisecond).String(),
		MeanConcurrency:   round2(perMinute / 60 * in.Latency.Seconds()),
	}
}

// roundTrip sends one logical request, reads and closes the body, and returns
// the outcome the sidecar would report.
func roundTrip(rt http.RoundTripper, req *http.Request) string {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		var re *retryhttp.Error
		if errors.As(err, &re) {
			return string(re.Outcome)
		}
		return string(retrypolicy.OutcomeUpstreamError)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get(retryhttp.HeaderOutcome)
}

func spacing(starts []time.Time) Spacing {
	if len(starts) < 2 {
		return Spacing{Min: "0s", P50: "0s", Max: "0s"}
	}
	gaps := make([]time.Duration, 0, len(starts)-1)
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].Sub(starts[i-1]))
	}
	slices.Sort(gaps)
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return Spacing{Min: r(gaps[0]), P50: r(gaps[(len(gaps)-1)/2]), Max: r(gaps[len(gaps)-1])}
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func shortUnit(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	}
	return d.String()
}

// quotaUpstream admits quota requests per rolling window, counted when they
// arrive; beyond that it answers 429 with Retry-After: the whole seconds until
// the oldest admitted request leaves the window. Every answer takes latency.
type quotaUpstream struct {
	s       *sched
	quota   int
	window  time.Duration
	latency time.Duration

	admitted        []time.Time // inside the window, oldest first
	starts          []time.Time
	firsts, retries int
	status429       int
	inFlight, peak  int
	area            float64 // attempt-seconds in flight
	last            time.Time
}

func (u *quotaUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	now := u.s.clk.Now()
	u.track(now, +1)
	u.starts = append(u.starts, now)
	if req.Header.Get(retryhttp.HeaderAttempt) == "1" {
		u.firsts++
	} else {
		u.retries++
	}
	for len(u.admitted) > 0 && !u.admitted[0].Add(u.window).After(now) {
		u.admitted = u.admitted[1:]
	}
	status, h := http.StatusOK, http.Header{}
	if len(u.admitted) < u.quota {
		u.admitted = append(u.admitted, now)
	} else {
		status = http.StatusTooManyRequests
		u.status429++
		wait := u.admitted[0].Add(u.window).Sub(now)
		h.Set("Retry-After", strconv.FormatInt(int64(max((wait+time.Second-1)/time.Second, 1)), 10))
	}
	p := procOf(req.Context())
	err := u.s.sleep(p, req.Context(), u.latency)
	u.track(u.s.clk.Now(), -1)
	if err != nil {
		return nil, err
	}
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: http.NoBody, Request: req,
	}, nil
}

func (u *quotaUpstream) track(now time.Time, delta int) {
	if !u.last.IsZero() {
		u.area += float64(u.inFlight) * now.Sub(u.last).Seconds()
	}
	u.last = now
	u.inFlight += delta
	u.peak = max(u.peak, u.inFlight)
}

// sched runs simulated goroutines (procs) one at a time on a virtual clock: a
// proc runs until it parks (sleep, the upstream's latency, a concurrency-gate
// queue) or ends, then the scheduler moves the clock to the next timer. Every
// wake-up is a timer of the clock, so the order of events is the order of
// virtual time, ties in creation order.
type sched struct {
	clk   *clocktest.Clock
	back  chan struct{} // the running proc parked or ended
	gates []*limits.Gate

	mu      sync.Mutex
	waiting []*proc // parked procs that also wake when their context ends
	inGate  atomic.Int64
	nextID  int
}

type proc struct {
	id    int
	wake  chan struct{}
	timer clock.Timer
	ctx   context.Context
}

func newSched(start time.Time) *sched {
	s := &sched{clk: clocktest.NewClock(start), back: make(chan struct{})}
	s.clk.BeforeFire = s.settle
	return s
}

// spawn makes a proc that starts at the current virtual time.
func (s *sched) spawn() *proc {
	s.nextID++
	p := &proc{id: s.nextID, wake: make(chan struct{})}
	s.clk.AfterFunc(0, func() { s.resume(p) })
	return p
}

// run is the body of p's goroutine.
func (s *sched) run(p *proc, f func()) {
	<-p.wake
	f()
	s.back <- struct{}{}
}

// resume hands the baton to p and waits until p parks or ends.
func (s *sched) resume(p *proc) {
	p.wake <- struct{}{}
	<-s.back
	s.wakeCanceled()
}

// loop moves the clock until no timer is left (every proc ended).
func (s *sched) loop() {
	for s.clk.Next() {
	}
}

// settle waits until every proc that a concurrency gate granted a slot to
// (while another proc held the baton) has asked for the baton again, so that
// it resumes at the virtual time of the grant.
func (s *sched) settle() {
	for {
		queued := 0
		for _, g := range s.gates {
			queued += g.Queued()
		}
		if s.inGate.Load() == int64(queued) {
			return
		}
		runtime.Gosched()
	}
}

// sleep parks p for d, or until ctx ends.
func (s *sched) sleep(p *proc, ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	s.mu.Lock()
	p.ctx = ctx
	s.waiting = append(s.waiting, p)
	s.mu.Unlock()
	p.timer = s.clk.AfterFunc(d, func() { s.unwait(p); s.resume(p) })
	s.back <- struct{}{}
	<-p.wake
	return ctx.Err()
}

func (s *sched) unwait(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = slices.DeleteFunc(s.waiting, func(q *proc) bool { return q == p })
}

// wakeCanceled resumes, in proc order, the parked procs whose context ended
// (a per-try timeout or the deadline fired during the upstream's latency).
func (s *sched) wakeCanceled() {
	for {
		s.mu.Lock()
		var hit *proc
		for _, p := range s.waiting {
			if p.ctx.Err() != nil && (hit == nil || p.id < hit.id) {
				hit = p
			}
		}
		s.mu.Unlock()
		if hit == nil {
			return
		}
		hit.timer.Stop()
		s.unwait(hit)
		s.resume(hit)
	}
}

// procClock is the clock of one proc's Transport: AfterFunc callbacks (the
// attempt timers) are followed by waking the procs they canceled, and a timer
// made with NewTimer (the concurrency gate's queue wait) parks the proc.
type procClock struct {
	s *sched
	p *proc
}

func (c procClock) Now() time.Time { return c.s.clk.Now() }

func (c procClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.s.clk.AfterFunc(d, func() { f(); c.s.wakeCanceled() })
}

// NewTimer is called by Gate.Acquire just before it blocks in a select on the
// timer, its grant channel and the context: the proc parks (hands the baton
// back) here. It wakes either by the timer (the scheduler fires it and waits
// for the proc) or by a grant from the proc holding the baton; then its Stop
// asks for the baton again.
func (c procClock) NewTimer(d time.Duration) clock.Timer {
	s, p := c.s, c.p
	gt := &gateTimer{s: s, p: p, ch: make(chan time.Time, 1)}
	s.inGate.Add(1)
	gt.t = s.clk.AfterFunc(d, func() {
		gt.fired = true
		s.inGate.Add(-1)
		gt.ch <- s.clk.Now()
		<-s.back
		s.wakeCanceled()
	})
	s.back <- struct{}{}
	return gt
}

type gateTimer struct {
	s     *sched
	p     *proc
	t     clock.Timer
	ch    chan time.Time
	fired bool
}

func (g *gateTimer) C() <-chan time.Time { return g.ch }

func (g *gateTimer) Stop() bool {
	if g.fired {
		return false
	}
	g.t.Stop()
	g.fired = true
	// Woken by a grant while another proc runs: queue up for the baton at the
	// current virtual time, then wait for it.
	g.s.clk.AfterFunc(0, func() { g.s.resume(g.p) })
	g.s.inGate.Add(-1)
	<-g.p.wake
	return true
}

type procKey struct{}

func procOf(ctx context.Context) *proc {
	p, _ := ctx.Value(procKey{}).(*proc)
	return p
}
