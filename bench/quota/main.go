// Command quota measures a SharedQuota with real retry-sidecar processes
// (docs/performance.md#shared-quota): N sidecars, built once from
// cmd/retry-sidecar and each started with GOMAXPROCS=1, a --policy-file
// holding the SharedQuota and a RetryPolicy whose upstream names it
// (quotaRef), and --quota-credentials-file for the store's ACL user; one
// Debian redis-server; upstreams on 127.0.0.1 that count arrivals per 10 ms.
// A load generator sends 1.2 × the quota's rate R through the sidecars'
// forward proxies with 10:1 skew (one busy pod of weight 10, the others 1),
// open loop; a request waits in its sidecar for a token up to its deadline
// (-max-wait), then is shed (503). The same load then goes through today's
// per-pod split (rateLimit R ÷ N per pod) for comparison.
//
// Each scenario's load starts -warmup (5 s) before its measured run, so the
// connections are open and the leases sized when counting starts; the
// warm-up's own most in any 1 s is shown beside the run's.
//
// Added latency is measured with probes sent in the same run through the same
// sidecars: to an upstream drawing on a second SharedQuota far above its
// demand, and to an upstream with no quota. Two columns: the time the spare
// quota's attempts waited in the sidecars for a token, from their histogram
// retry_sidecar_quota_admission_wait_seconds (bucket bounds; le="0": a token
// on hand), and the difference of the two probes' client-side quantiles
// (request sent to response read), which holds the machine's noise too.
//
//	go run ./bench/quota                               # about 6 minutes
//	go run ./bench/quota -duration 60s -outage 30s     # the targets, about 10 minutes
//
// Everything runs on 127.0.0.1 and is stopped at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxWait is -max-wait: every upstream's deadline; verbose is -v;
// profileDir is -sidecar-profiles.
var (
	maxWait    time.Duration
	verbose    bool
	profileDir string
)

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of each scenario")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Second, "load before each scenario's measured run (its connections opened, its leases sized), not counted")
	flag.DurationVar(&o.outage, "outage", 15*time.Second, "how long Redis is stopped in the store-loss scenario (from a third of the run)")
	flag.Float64Var(&o.rate, "rate", 1000, "the quota's rate R per second")
	flag.IntVar(&o.burst, "burst", 500, "the quota's burst (docs/quota.md#choosing-burst: half a second of R or more)")
	flag.Float64Var(&o.demand, "demand", 1.2, "the demand offered to the quota, × R")
	flag.Float64Var(&o.probe, "probe-rate", 100, "latency probes per second in all, to each of the spare-quota and the no-quota upstream")
	flag.DurationVar(&maxWait, "max-wait", time.Second, "the requests' deadline: how long one may wait for a token before it is shed")
	podCounts := flag.String("pods", "10,50", "fleet sizes of the steady scenarios (none: only the growth and the outage)")
	flag.BoolVar(&verbose, "v", false, "print at the end of each scenario each sidecar's quota series, the wait histograms, the probes slower than 20 ms and the arrivals per second")
	only := flag.Bool("steady-only", false, "run only the steady shared-quota scenarios (no per-pod split, growth or outage)")
	cpuprofile := flag.String("cpuprofile", "", "write the load generator's CPU profile here")
	flag.StringVar(&profileDir, "sidecar-profiles", "", "write 5 s CPU profiles of the busy sidecar and of one other, from the middle of each scenario, into this directory")
	flag.Parse()
	for _, f := range strings.FieldsFunc(*podCounts, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "-pods: want a comma-separated list of counts")
			os.Exit(2)
		}
		o.pods = append(o.pods, n)
	}
	if *cpuprofile != "" {
		if f, err := os.Create(*cpuprofile); err == nil {
			_ = pprof.StartCPUProfile(f)
		}
	}
	code := benchmark(o, *only)
	pprof.StopCPUProfile()
	os.Exit(code)
}

type options struct {
	duration, outage time.Duration
	warmup           time.Duration
	rate, probe      float64
	demand           float64
	burst            int
	pods             []int
}

// probePods is how many sidecars (the busy one first) carry the latency probes.
const probePods = 10

// env is what every scenario shares.
type env struct {
	options
	dir, bin, creds string
	redis           *redis
	up              hosts
	partner         *upstream
}

func benchmark(o options, only bool) int {
	e, cleanup, err := setup(o)
	defer cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("R = %.0f/s, burst %d, demand %.2g R, skew 10:1, %s per scenario, requests wait up to %s for a token; "+
		"each sidecar a process with GOMAXPROCS=1; %d CPUs; load average at the start %s\n\n",
		o.rate, o.burst, o.demand, o.duration, maxWait, cpus(), loadavg())
	fmt.Printf("| scenario | pods | admitted (%% of R) | max in any 1 s (R + burst = %d) | busy pod admitted (%% of its demand) | quota's wait in the sidecar p50 / p99 (spare quota) | added latency at the client p50 / p99 (quota − none) | sidecar latency without quota p50 / p99 | store ops/s per pod (mean / max) | sidecars' CPU (of 2) | load avg |\n",
		int(o.rate)+o.burst)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	// The growth and the outage (10 pods) run after the first fleet size,
	// before the larger ones, which take this 2-CPU machine close to its
	// limit (docs/performance.md#shared-quota).
	var runs []scenario
	for i, n := range o.pods {
		runs = append(runs, scenario{name: fmt.Sprintf("shared%d", n), pods: n, shared: true})
		if !only {
			runs = append(runs, scenario{name: fmt.Sprintf("split%d", n), pods: n})
		}
		if i == 0 {
			runs = append(runs, e.growthAndOutage(only)...)
		}
	}
	if len(o.pods) == 0 {
		runs = e.growthAndOutage(only)
	}
	var notes []string
	for _, sc := range runs {
		res, err := e.run(sc)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", sc.name, err)
			return 1
		}
		res.print(e)
		notes = append(notes, res.notes...)
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println(n)
	}
	return 0
}

// growthAndOutage are the two 10-pod scenarios beside the steady ones.
func (e *env) growthAndOutage(only bool) []scenario {
	if only {
		return nil
	}
	return []scenario{{name: "grow", pods: 10, grow: 10, shared: true},
		{name: "loss", pods: 10, shared: true, outage: e.outage}}
}

// setup builds the sidecar and starts Redis and the upstreams; cleanup stops
// what was started.
func setup(o options) (*env, func(), error) {
	e := &env{options: o}
	var err error
	stops := []func(){}
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if e.dir, err = os.MkdirTemp("", "bench-quota-"); err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { os.RemoveAll(e.dir) })
	if e.bin, err = build(e.dir); err != nil {
		return nil, cleanup, fmt.Errorf("building retry-sidecar: %w", err)
	}
	e.creds = e.dir + "/credentials"
	if err := os.WriteFile(e.creds, []byte("username: "+redisUser+"\npassword: "+redisPassword+"\n"), 0o600); err != nil {
		return nil, cleanup, err
	}
	if e.redis, err = startRedis(e.dir); err != nil {
		return nil, cleanup, fmt.Errorf("redis-server: %w", err)
	}
	stops = append(stops, func() { e.redis.stop() })
	slots := int((o.warmup+o.duration+5*time.Second)/bucket) + 1
	var ups [3]*upstream
	for i := range ups {
		if ups[i], err = startUpstream(slots); err != nil {
			return nil, cleanup, err
		}
		stops = append(stops, ups[i].close)
	}
	e.partner = ups[0]
	e.up = hosts{partner: ups[0].host, spare: ups[1].host, direct: ups[2].host}
	return e, cleanup, nil
}

type scenario struct {
	name   string
	pods   int
	grow   int // sidecars added at half time
	shared bool
	outage time.Duration // Redis stopped from a third of the run for this long
}

type result struct {
	sc               scenario
	admitted, maxWin int
	warmMax          int      // the most in any 1 s of the warm-up
	waits            [2]waits // the partner's and the spare quota's admission waits in the sidecars
	busyPct          float64
	added, base      [2]time.Duration // p50, p99
	opsMean, opsMax  float64
	load             string
	cpu              float64 // the sidecars' CPU time over the warm-up's and the measured run's, in CPUs
	notes            []string
}

func (r result) print(e *env) {
	name := map[bool]string{true: "shared quota", false: "per-pod split (today)"}[r.sc.shared]
	pods := strconv.Itoa(r.sc.pods)
	switch {
	case r.sc.grow > 0:
		name += ", pods added at half time"
		pods = fmt.Sprintf("%d → %d", r.sc.pods, r.sc.pods+r.sc.grow)
	case r.sc.outage > 0:
		name += fmt.Sprintf(", Redis stopped %s", r.sc.outage)
	}
	ops := fmt.Sprintf("%.1f / %.1f", r.opsMean, r.opsMax)
	if !r.sc.shared {
		ops = "0"
	}
	fmt.Printf("| %s | %s | %.1f %% | %d (warm-up %d) | %.1f %% | %s | %s / %s | %s / %s | %s | %.2f | %s |\n", name, pods,
		100*float64(r.admitted)/(e.rate*e.duration.Seconds()), r.maxWin, r.warmMax, r.busyPct, r.waits[1],
		signed(r.added[0]), signed(r.added[1]), r.base[0].Round(time.Microsecond), r.base[1].Round(time.Microsecond), ops, r.cpu, r.load)
}

func signed(d time.Duration) string {
	d = d.Round(time.Microsecond)
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}

// run starts the scenario's sidecars, drives them for the duration and
// measures.
func (e *env) run(sc scenario) (result, error) {
	res := result{sc: sc}
	policy, err := policyFile(e.dir, sc.name, e.up, sc.shared, sc.pods, e.rate, e.burst, e.redis.addr)
	if err != nil {
		return res, err
	}
	fleet, err := startSidecars(e.bin, e.dir, sc.name, sc.pods, policy, e.creds)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, s := range fleet {
			s.kill()
		}
	}()
	reachable := fmt.Sprintf(`retry_sidecar_quota_store_state{quota="partner-%s",state="reachable"}`, sc.name)
	opsSeries := fmt.Sprintf(`retry_sidecar_quota_store_operations_total{quota="partner-%s"}`, sc.name)
	if sc.shared && waitAll(fleet, reachable, 10*time.Second) < 0 {
		return res, fmt.Errorf("the sidecars did not reach the store within 10 s")
	}
	// The sidecars' counters are read before the load starts and after it
	// ends, so their columns cover the warm-up too: a read costs a sidecar
	// about 3 ms of CPU (32 KB of /metrics), and the 50-pod fleet takes 2
	// CPUs close to their limit; 150 reads at once at the start of a
	// measured run stalled it for 6 s (arrivals 60-90 % of R), and 50 reads
	// 20 ms apart in the warm-up tipped it into collapse once in three runs.
	before, at0 := scrape(fleet)
	cpu0 := fleetCPU(fleet)
	begin := time.Now().Add(500 * time.Millisecond)
	start := begin.Add(e.warmup)
	rec := &recorder{start: start}
	e.partner.reset(begin, e.warmup)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(e.duration))
	defer cancel()
	var wg sync.WaitGroup
	weights := float64(10 + sc.pods - 1)
	load := func(i int, s *sidecar, at time.Time) {
		w := 1.0
		if i == 0 {
			w = 10
		}
		drive(ctx, &wg, s, i, toPartner, e.up.partner, e.demand*e.rate*w/weights, at, rec)
		// The probes go to the first probePods sidecars only: the spare
		// quota's clients in the others stay idle (a lease a second), so
		// the probes do not double the fleet's store operations.
		if i < probePods {
			probe := e.probe / float64(min(sc.pods+sc.grow, probePods))
			drive(ctx, &wg, s, i, toSpare, e.up.spare, probe, at, rec)
			drive(ctx, &wg, s, i, toDirect, e.up.direct, probe, at, rec)
		}
	}
	for i, s := range fleet {
		load(i, s, begin)
	}
	time.Sleep(time.Until(start))
	var later []func() string // notes of the growth or the outage, once the run is over
	load0 := loadavg()
	switch {
	case sc.grow > 0:
		time.Sleep(time.Until(start.Add(e.duration / 2)))
		more, err := startSidecars(e.bin, e.dir, sc.name+"-more", sc.grow, policy, e.creds)
		if err != nil {
			cancel()
			wg.Wait()
			return res, err
		}
		joined := time.Since(start)
		for i, s := range more {
			load(sc.pods+i, s, time.Now())
		}
		fleet = append(fleet, more...)
		later = append(later, func() string {
			n, most := e.partner.sum(joined+time.Second, e.duration)
			return fmt.Sprintf("%d → %d pods: the added sidecars were serving %s after the start; from 1 s later to the end: admitted %.1f %% of R, max in any 1 s %d",
				sc.pods, sc.pods+sc.grow, joined.Round(time.Millisecond), 100*float64(n)/(e.rate*(e.duration-joined-time.Second).Seconds()), most)
		})
	case sc.outage > 0:
		from := e.duration / 3
		time.Sleep(time.Until(start.Add(from)))
		e.redis.stop()
		time.Sleep(sc.outage)
		if err := e.redis.start(); err != nil {
			cancel()
			wg.Wait()
			return res, fmt.Errorf("redis-server restart: %w", err)
		}
		back := time.Now()
		inStep := waitAll(fleet, reachable, 5*time.Second)
		later = append(later, func() string { return e.outageNote(sc, rec, from, inStep, back.Sub(start)) })
	}
	if profileDir != "" {
		time.Sleep(time.Until(start.Add(e.duration/2 - 2500*time.Millisecond)))
		var pw sync.WaitGroup
		for i := range min(2, len(fleet)) {
			pw.Go(func() {
				path := fmt.Sprintf("%s/%s-%d.pprof", profileDir, sc.name, i)
				if err := fleet[i].profile(path, 5*time.Second); err != nil {
					fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
				}
			})
		}
		pw.Wait()
	}
	<-ctx.Done()
	after, at1 := scrape(fleet)
	res.cpu = (fleetCPU(fleet) - cpu0).Seconds() / at1.Sub(at0).Seconds()
	probing := min(probePods, len(before))
	res.waits = [2]waits{waitsOf(after, "partner-"+sc.name).minus(waitsOf(before, "partner-"+sc.name)),
		waitsOf(after[:probing], "spare-"+sc.name).minus(waitsOf(before[:probing], "spare-"+sc.name))}
	if verbose {
		fmt.Fprintf(os.Stderr, "%s: admissions by wait in the sidecars (bound in s: count), partner %v, spare %v\n",
			sc.name, res.waits[0].buckets(), res.waits[1].buckets())
	}
	ops0, ops1 := values(before, opsSeries), values(after, opsSeries)
	ops0 = append(ops0, make([]float64, len(ops1)-len(ops0))...) // the pods added at half time
	window := at1.Sub(at0).Seconds()
	if verbose {
		slow := func(s sample) bool { return s.lat > 20*time.Millisecond }
		probes := append(rec.samples(toSpare, -e.warmup, e.duration, slow), rec.samples(toDirect, -e.warmup, e.duration, slow)...)
		slices.SortFunc(probes, func(a, b sample) int { return int(a.at - b.at) })
		for _, s := range probes {
			fmt.Fprintf(os.Stderr, "%s: a probe to %s sent at %s took %s (pod %d, status %d)\n", sc.name,
				map[int]string{toSpare: "the spare quota", toDirect: "no quota"}[s.to], s.at.Round(time.Millisecond), s.lat.Round(time.Millisecond), s.pod, s.status)
		}
		dump(after, "partner-"+sc.name)
		fmt.Fprintf(os.Stderr, "%s: arrivals per second at the upstream: %v\n", sc.name, e.partner.perSecond(e.duration))
	}
	res.load = load0 + " → " + loadavg()
	wg.Wait()
	res.admitted, res.maxWin = e.partner.sum(0, e.duration)
	_, res.warmMax = e.partner.sum(-e.warmup, 0)
	busy := rec.samples(toPartner, 0, e.duration, func(s sample) bool { return s.pod == 0 })
	ok := 0
	for _, s := range busy {
		if s.status == 200 {
			ok++
		}
	}
	res.busyPct = 100 * float64(ok) / float64(max(len(busy), 1))
	spare, direct := rec.samples(toSpare, 0, e.duration, nil), rec.samples(toDirect, 0, e.duration, nil)
	res.base = [2]time.Duration{quantile(direct, 0.5), quantile(direct, 0.99)}
	res.added = [2]time.Duration{quantile(spare, 0.5) - res.base[0], quantile(spare, 0.99) - res.base[1]}
	total := 0.0
	for i := range ops1 {
		d := ops1[i] - ops0[i]
		total += d
		res.opsMax = max(res.opsMax, d/window)
	}
	res.opsMean = total / window / (float64(sc.pods) + float64(sc.grow)/2)
	for _, note := range later {
		res.notes = append(res.notes, note())
	}
	res.notes = append(res.notes, failures(sc, rec)...)
	return res, nil
}

// outageNote is the store-loss scenario's line: admissions while Redis was
// stopped, the probes' extra wait then, and how long the fleet took to be
// back in step.
func (e *env) outageNote(sc scenario, rec *recorder, from time.Duration, inStep, restarted time.Duration) string {
	n, most := e.partner.sum(from, from+sc.outage)
	pct := 100 * float64(n) / (e.rate * sc.outage.Seconds())
	spare, direct := rec.samples(toSpare, from, from+sc.outage, nil), rec.samples(toDirect, from, from+sc.outage, nil)
	step := "not within 5 s"
	if inStep >= 0 {
		step = inStep.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("Redis stopped %s (from %s): admitted %.1f %% of R meanwhile (overshoot %+.1f %%), max in any 1 s %d; "+
		"probes drawing on a quota of the stopped store vs no quota: p99 %s vs %s, max %s vs %s; every sidecar reachable again %s after the restart (at %s)",
		sc.outage, from, pct, pct-100, most, quantile(spare, 0.99).Round(time.Microsecond), quantile(direct, 0.99).Round(time.Microsecond),
		quantile(spare, 1).Round(time.Microsecond), quantile(direct, 1).Round(time.Microsecond), step, restarted.Round(time.Millisecond))
}

// failures notes requests that ended other than 200 or 503 (shed).
func failures(sc scenario, rec *recorder) []string {
	var notes []string
	for to, name := range []string{"partner", "spare", "direct"} {
		bad := rec.samples(to, -time.Hour, time.Hour, func(s sample) bool {
			return s.status != 200 && (s.status != 503 || to != toPartner)
		})
		if len(bad) > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d requests to %s ended with status %d (0: failed) or other", sc.name, len(bad), name, bad[0].status))
		}
	}
	return notes
}

// waitAll waits until series is 1 on every sidecar and returns how long that
// took, or -1 after limit.
func waitAll(fleet []*sidecar, series string, limit time.Duration) time.Duration {
	t0 := time.Now()
	for time.Since(t0) < limit {
		all := true
		bodies, _ := scrape(fleet)
		for _, v := range values(bodies, series) {
			all = all && v == 1
		}
		if all {
			return time.Since(t0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// dump prints each sidecar's series of quota q, from its /metrics body.
func dump(bodies [][]byte, q string) {
	for i, b := range bodies {
		var keep []string
		for l := range strings.Lines(string(b)) {
			if strings.Contains(l, `quota="`+q+`"`) && !strings.Contains(l, "_bucket") {
				keep = append(keep, strings.TrimPrefix(strings.TrimSuffix(l, "\n"), "retry_sidecar_quota_"))
			}
		}
		fmt.Fprintf(os.Stderr, "sidecar %d: %s\n", i, strings.Join(keep, "  "))
	}
}
