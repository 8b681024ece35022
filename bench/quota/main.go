// Command quota measures a SharedQuota's client against a real redis-server
// on loopback (docs/performance.md#shared-quota): N pods, each an in-process
// quota.Client with its own Redis connection, offered 1.2 × the quota's rate
// R with 10:1 skew (one busy pod of weight 10, the others 1), arrivals counted
// where admission lets them through (an attempt that took a token). An
// attempt without a token waits in its pod's line, asking again every
// millisecond, for at most -max-wait (a request's deadline), then is shed.
// The same load then goes through today's per-pod split (R ÷ N per pod,
// x/time/rate) for comparison.
//
//	go run ./bench/quota                     # ~2 minutes: 15 s per scenario, Redis stopped 6 s
//	go run ./bench/quota -duration 60s -outage 30s
//
// Everything runs on 127.0.0.1; redis-server (Debian's) is started on a free
// port with its own directory and stopped at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/retrydev/retry-operator/internal/admission"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

func main() {
	duration := flag.Duration("duration", 15*time.Second, "length of each scenario")
	outage := flag.Duration("outage", 6*time.Second, "how long Redis is stopped in the store-loss scenario")
	r := flag.Float64("rate", 1000, "the quota's rate R per second")
	burst := flag.Int("burst", 200, "the quota's burst")
	flag.DurationVar(&maxWait, "max-wait", time.Second, "how long an attempt may wait for a token before it is shed")
	podCounts := flag.String("pods", "10,50", "fleet sizes of the steady scenarios")
	only := flag.Bool("steady-only", false, "run only the steady shared-quota scenarios (no comparison, growth or outage)")
	flag.Parse()

	os.Exit(benchmark(*duration, *outage, *r, *burst, *podCounts, *only))
}

// benchmark runs the scenarios and returns the exit code.
func benchmark(duration, outage time.Duration, r float64, burst int, podCounts string, only bool) int {
	srv, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis-server:", err)
		return 1
	}
	defer srv.stop()
	spec := quota.Spec{RequestsPerSecond: r, Burst: burst, OnStoreLoss: quota.StoreLossLastShare}
	fmt.Printf("R = %.0f/s, burst %d, demand 1.2 R, skew 10:1, %s per scenario, attempts wait up to %s for a token\n\n",
		r, burst, duration, maxWait)
	fmt.Println("| scenario | pods | admitted (% of R) | max in any 1 s (R + burst = " + strconv.Itoa(int(r)+burst) + ") | busy pod admitted (% of its demand) | added latency p50 / p99 / max | store ops/s per pod |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, f := range strings.Split(podCounts, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "-pods: want a comma-separated list of counts")
			return 2
		}
		for _, shared := range []bool{true, false} {
			if !shared && only {
				continue
			}
			res := run(srv, spec, scenario{name: fmt.Sprintf("q%d-%t", n, shared), pods: n, shared: shared, d: duration})
			res.print()
		}
	}
	if only {
		return 0
	}
	grow := run(srv, spec, scenario{name: "grow", pods: 10, grow: 10, shared: true, d: duration})
	grow.print()
	loss := run(srv, spec, scenario{name: "loss", pods: 10, shared: true, d: duration, outage: outage})
	loss.print()
	fmt.Println()
	fmt.Printf("10 → 20 pods at %s: admitted after the growth %.1f %% of R (max 1 s window %d)\n",
		duration/2, grow.afterPct, grow.afterMax)
	fmt.Printf("Redis stopped for %s: admitted during the outage %.1f %% of R (overshoot %+.1f %%), max TakeAt during it %s; all pods back in step %s after it returned\n",
		outage, loss.outagePct, loss.outagePct-100, loss.outageMaxTake, loss.backInStep)
	return 0
}

type scenario struct {
	name   string
	pods   int
	grow   int // pods added at d/2
	shared bool
	d      time.Duration
	outage time.Duration // Redis stopped from d/3 for this long
}

type result struct {
	sc            scenario
	rate          float64
	admitted      int
	maxWindow     int
	busyPct       float64
	lat           []time.Duration // p50, p99, max
	opsPerPod     float64
	afterPct      float64
	afterMax      int
	outagePct     float64
	outageMaxTake time.Duration
	backInStep    time.Duration
}

func (r result) print() {
	name := map[bool]string{true: "shared quota", false: "per-pod split (today)"}[r.sc.shared]
	pods := strconv.Itoa(r.sc.pods)
	switch {
	case r.sc.grow > 0:
		name += ", 10 → 20 pods mid-run"
		pods = "10 → 20"
	case r.sc.outage > 0:
		name += fmt.Sprintf(", Redis stopped %s", r.sc.outage)
	}
	ops := fmt.Sprintf("%.1f", r.opsPerPod)
	if !r.sc.shared {
		ops = "0"
	}
	fmt.Printf("| %s | %s | %.1f %% | %d | %.1f %% | %s / %s / %s | %s |\n", name, pods,
		100*float64(r.admitted)/(r.rate*r.sc.d.Seconds()), r.maxWindow, r.busyPct, r.lat[0], r.lat[1], r.lat[2], ops)
}

// gate is one pod's admission: the shared quota's client or a per-pod limiter.
// gate is one pod's admission: a token now, else when to ask again.
type gate interface {
	take(now time.Time, waited time.Duration) (bool, time.Duration)
}

type clientGate struct{ c *quota.Client }

func (g clientGate) take(now time.Time, waited time.Duration) (bool, time.Duration) {
	wait, v := g.c.TakeAt(now, waited)
	return v == admission.QuotaGranted, wait
}

type limiterGate struct{ l *rate.Limiter }

func (g limiterGate) take(now time.Time, _ time.Duration) (bool, time.Duration) {
	return g.l.AllowN(now, 1), time.Duration(float64(time.Second) / float64(g.l.Limit()))
}

// maxWait is -max-wait.
var maxWait time.Duration

const bucket = 10 * time.Millisecond

// counts are admissions per 10 ms bucket of the run, shared by every pod.
type counts struct {
	start time.Time
	b     []atomic.Int64
}

func (c *counts) add(now time.Time) {
	if i := int(now.Sub(c.start) / bucket); i >= 0 && i < len(c.b) {
		c.b[i].Add(1)
	}
}

// sum is the admissions in [from, to), and the most in any 1 s window inside.
func (c *counts) sum(from, to time.Duration) (int, int) {
	lo, hi := int(from/bucket), min(int(to/bucket), len(c.b))
	win := int(time.Second / bucket)
	total, run, most := 0, 0, 0
	for i := lo; i < hi; i++ {
		n := int(c.b[i].Load())
		total += n
		run += n
		if i-lo >= win {
			run -= int(c.b[i-win].Load())
		}
		most = max(most, run)
	}
	return total, most
}

type pod struct {
	gate    gate
	client  *quota.Client
	store   *redisstore.Store
	rate    float64 // offered attempts per second
	offered atomic.Int64
	taken   atomic.Int64
	lat     []time.Duration
	maxTake atomic.Int64
}

func run(srv *redis, spec quota.Spec, sc scenario) result {
	spec.Name = sc.name
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	total := sc.pods + sc.grow
	c := &counts{start: time.Now().Add(500 * time.Millisecond), b: make([]atomic.Int64, int(sc.d/bucket)+1)}
	weights := float64(10 + sc.pods - 1)
	pods := make([]*pod, total)
	for i := range pods {
		w := 1.0
		if i == 0 {
			w = 10
		}
		p := &pod{rate: spec.RequestsPerSecond * 1.2 * w / weights}
		if sc.shared {
			p.store = redisstore.New(redisstore.Options{Address: srv.addr, KeyPrefix: v1alpha1.QuotaKeys})
			p.client = quota.New(spec, p.store, clock.Real{}, "pod-"+strconv.Itoa(i), log, quota.Observer{})
			p.gate = clientGate{p.client}
		} else {
			p.gate = limiterGate{rate.NewLimiter(rate.Limit(spec.RequestsPerSecond/float64(sc.pods)), max(spec.Burst/sc.pods, 1))}
		}
		pods[i] = p
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithDeadline(context.Background(), c.start.Add(sc.d))
	defer cancel()
	startPod := func(p *pod, at time.Time) {
		if p.client != nil {
			_ = p.client.Start()
		}
		wg.Go(func() { p.drive(ctx, c, at) })
	}
	for _, p := range pods[:sc.pods] {
		startPod(p, c.start)
	}
	res := result{sc: sc, rate: spec.RequestsPerSecond}
	time.Sleep(time.Until(c.start))
	opsBefore := uint64(0) // the first leases and the ramp before the measured run
	for _, p := range pods {
		if p.client != nil {
			opsBefore += p.client.Stats().Operations
		}
	}
	if sc.grow > 0 {
		time.Sleep(time.Until(c.start.Add(sc.d / 2)))
		for _, p := range pods[sc.pods:] {
			startPod(p, time.Now())
		}
	}
	var outageFrom, outageTo time.Duration
	if sc.outage > 0 {
		outageFrom, outageTo = sc.d/3, sc.d/3+sc.outage
		time.Sleep(time.Until(c.start.Add(outageFrom)))
		srv.stop()
		for _, p := range pods {
			p.maxTake.Store(0)
		}
		time.Sleep(sc.outage)
		for _, p := range pods {
			res.outageMaxTake = max(res.outageMaxTake, time.Duration(p.maxTake.Load()))
		}
		if err := srv.start(); err != nil {
			panic("redis-server restart: " + err.Error()) // nothing can be measured without it
		}
		back := time.Now()
		for !allReachable(pods) && time.Since(back) < 5*time.Second {
			time.Sleep(time.Millisecond)
		}
		res.backInStep = time.Since(back).Round(time.Millisecond)
	}
	wg.Wait()
	res.admitted, res.maxWindow = c.sum(0, sc.d)
	res.busyPct = 100 * float64(pods[0].taken.Load()) / float64(max(pods[0].offered.Load(), 1))
	var lat []time.Duration
	ops := -opsBefore
	for _, p := range pods {
		lat = append(lat, p.lat...)
		if p.client != nil {
			ops += p.client.Stats().Operations
			p.client.Close()
			p.store.Close()
		}
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))] }
	res.lat = []time.Duration{q(0.5), q(0.99), lat[len(lat)-1]}
	res.opsPerPod = float64(ops) / sc.d.Seconds() / float64(sc.pods+sc.grow/2)
	if sc.grow > 0 {
		n, m := c.sum(sc.d/2+time.Second, sc.d)
		res.afterPct, res.afterMax = 100*float64(n)/(spec.RequestsPerSecond*(sc.d/2-time.Second).Seconds()), m
	}
	if sc.outage > 0 {
		n, _ := c.sum(outageFrom, outageTo)
		res.outagePct = 100 * float64(n) / (spec.RequestsPerSecond * sc.outage.Seconds())
	}
	return res
}

func allReachable(pods []*pod) bool {
	for _, p := range pods {
		if p.client != nil && p.client.Stats().State != quota.StateReachable {
			return false
		}
	}
	return true
}

// drive offers the pod's attempts evenly spaced from at until ctx ends. An
// attempt that finds no token waits in the pod's line (oldest first) and asks
// again when the gate said a token may be there (the next lease, as the
// sidecar's admission does); it is shed after maxWait. Latency is the time one
// TakeAt took.
func (p *pod) drive(ctx context.Context, c *counts, at time.Time) {
	gap := time.Duration(float64(time.Second) / p.rate)
	next := at
	var line []time.Time // arrival times of the attempts waiting
	var retry time.Time  // when the head of the line asks again
	take := func(arrived time.Time) bool {
		t0 := time.Now()
		ok, wait := p.gate.take(t0, t0.Sub(arrived))
		took := time.Since(t0)
		if len(p.lat) < 1<<20 {
			p.lat = append(p.lat, took)
		}
		if int64(took) > p.maxTake.Load() {
			p.maxTake.Store(int64(took))
		}
		if ok {
			p.taken.Add(1)
			c.add(t0)
		} else {
			retry = t0.Add(wait)
		}
		return ok
	}
	for ctx.Err() == nil {
		wake := next
		if len(line) > 0 && retry.Before(wake) {
			wake = retry
		}
		if d := time.Until(wake); d > 0 {
			time.Sleep(d)
		}
		now := time.Now()
		for len(line) > 0 && now.Sub(line[0]) > maxWait {
			line = line[1:] // shed
		}
		if len(line) > 0 && !now.Before(retry) {
			// Every waiter asks again, as each request waiting in a sidecar
			// does after a lease; those without a token wait on.
			kept := line[:0]
			for _, arrived := range line {
				if !take(arrived) {
					kept = append(kept, arrived)
				}
			}
			line = kept
		}
		for ; !next.After(now) && ctx.Err() == nil; next = next.Add(gap) {
			p.offered.Add(1)
			if !take(next) {
				line = append(line, next)
			}
		}
	}
}

// redis is a redis-server this program started.
type redis struct {
	addr, dir string
	cmd       *exec.Cmd
}

func startRedis() (*redis, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "bench-quota-")
	if err != nil {
		return nil, err
	}
	s := &redis{addr: addr, dir: dir}
	return s, s.start()
}

func (s *redis) start() error {
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.CommandContext(context.Background(), "redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", s.addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("not listening on %s after 5 s", s.addr)
}

func (s *redis) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
