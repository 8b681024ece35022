// Command quota measures a SharedQuota with real retry-sidecar processes
// (docs/performance.md#shared-quota): N sidecars, built once from
// cmd/retry-sidecar and each started with GOMAXPROCS=1, one Debian
// redis-server, upstreams on 127.0.0.1 that count arrivals per 10 ms.
//
// By default (-via endpoint) the sidecars lease from the manager's lease
// endpoint, as in a cluster (docs/quota.md#trust): each is given a
// --config-dir holding policies.json as the manager renders it (version 4,
// each quota naming the endpoint: URL, address, CA bundle, token file) and
// its pod's token. The endpoint is two replicas, each a process of this
// program running the real leaseserver handler and listener over HTTPS
// (replica.go) with the store's credentials, behind a TCP balancer on
// 127.0.0.1 that plays the Service (balancer.go). There is no API server:
// the replicas know the tokens and the quotas from tables
// (leaseserver.StaticTokens, StaticQuotas). With -via file the sidecars are
// given a --policy-file holding the SharedQuotas and a RetryPolicy whose
// upstreams name them, and --quota-credentials-file: they lease from Redis
// themselves.
//
// A load generator sends 1.2 × the quota's rate R through the sidecars'
// forward proxies with 10:1 skew (one busy pod of weight 10, the others 1),
// open loop; a request waits in its sidecar for a send time up to its
// deadline (-max-wait), then is shed (503). The same load then goes through
// today's per-pod split (rateLimit R ÷ N per pod) for comparison.
//
// Each scenario's load starts -warmup (5 s) before its measured run, so the
// connections are open and the leases sized when counting starts; the
// warm-up's own most in any 1 s is shown beside the run's.
//
// Added latency is measured with probes sent in the same run through the same
// sidecars: to an upstream drawing on a second SharedQuota far above its
// demand, and to an upstream with no quota. Two columns: the time the spare
// quota's attempts waited in the sidecars for a send time, from their histogram
// retry_sidecar_quota_admission_wait_seconds (bucket bounds; le="0": a send time
// on hand), and the difference of the two probes' client-side quantiles
// (request sent to response read), which holds the machine's noise too.
//
//	go run ./bench/quota                               # about 8 minutes
//	go run ./bench/quota -duration 60s -outage 30s     # the targets, about 14 minutes
//	go run ./bench/quota -via file                     # the sidecars on Redis, for comparison
//
// Everything runs on 127.0.0.1 and is stopped at the end.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxWait is -max-wait: every upstream's deadline; verbose is -v;
// profileDir is -sidecar-profiles.
var (
	maxWait    time.Duration
	verbose    bool
	profileDir string
)

// How the sidecars reach the store (-via).
const (
	viaEndpoint = "endpoint"
	viaFile     = "file"
)

// The kinds of scenario (-scenarios), in the order they run.
var kinds = []string{"shared", "split", "grow", "loss", "down", "kill"}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case replicaCommand:
			os.Exit(serveReplica(os.Args[2:]))
		case balancerCommand:
			os.Exit(serveBalancer(os.Args[2:]))
		}
	}
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of each scenario")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Second, "load before each scenario's measured run (its connections opened, its leases sized), not counted")
	flag.DurationVar(&o.outage, "outage", 15*time.Second, "how long Redis (loss) or every lease endpoint replica (down) is stopped, from a third of the run")
	flag.Float64Var(&o.rate, "rate", 1000, "the quota's rate R per second")
	flag.IntVar(&o.burst, "burst", 500, "the quota's burst: how long after its time a send time stays good, (burst − 1) / R (docs/quota.md#choosing-burst)")
	flag.Float64Var(&o.demand, "demand", 1.2, "the demand offered to the quota, × R")
	flag.Float64Var(&o.probe, "probe-rate", 100, "latency probes per second in all, to each of the spare-quota and the no-quota upstream")
	flag.DurationVar(&maxWait, "max-wait", time.Second, "the requests' deadline: how long one may wait for a send time before it is shed")
	flag.StringVar(&o.via, "via", viaEndpoint, "how the sidecars reach the store: endpoint (the manager's lease endpoint, two replicas) or file (--policy-file, Redis directly)")
	podCounts := flag.String("pods", "10,50", "fleet sizes of the steady scenarios (shared, split); the others run with 10 after the first size")
	only := flag.String("scenarios", strings.Join(kinds, ","), "which kinds of scenario to run: shared (steady), split (today's per-pod split), grow (10 → 20 pods), loss (Redis stopped), down (every lease endpoint replica stopped), kill (one of the two killed)")
	flag.BoolVar(&verbose, "v", false, "print at the end of each scenario each sidecar's quota series, the wait histograms, the probes slower than 20 ms and the arrivals per second")
	steady := flag.Bool("steady-only", false, "run only the steady shared-quota scenarios (-scenarios shared)")
	cpuprofile := flag.String("cpuprofile", "", "write the load generator's CPU profile here")
	flag.StringVar(&profileDir, "sidecar-profiles", "", "write 5 s CPU profiles of the busy sidecar and of one other, from the middle of each scenario, into this directory")
	flag.Parse()
	var err error
	if o.pods, err = counts(*podCounts); err == nil {
		if *steady {
			*only = "shared"
		}
		o.kinds, err = kindsOf(*only, o.via)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		if f, err := os.Create(*cpuprofile); err == nil {
			_ = pprof.StartCPUProfile(f)
		}
	}
	code := benchmark(o)
	pprof.StopCPUProfile()
	os.Exit(code)
}

// counts parses -pods.
func counts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-pods: want a comma-separated list of counts")
		}
		out = append(out, n)
	}
	return out, nil
}

// kindsOf parses -scenarios; down and kill need the endpoint.
func kindsOf(list, via string) (map[string]bool, error) {
	if via != viaEndpoint && via != viaFile {
		return nil, fmt.Errorf("-via: %q: want endpoint or file", via)
	}
	out := map[string]bool{}
	for _, k := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' }) {
		if !slices.Contains(kinds, k) {
			return nil, fmt.Errorf("-scenarios: %q: want some of %s", k, strings.Join(kinds, ", "))
		}
		out[k] = via == viaEndpoint || (k != "down" && k != "kill")
	}
	return out, nil
}

type options struct {
	duration, outage time.Duration
	warmup           time.Duration
	rate, probe      float64
	demand           float64
	burst            int
	pods             []int
	via              string
	kinds            map[string]bool
}

// probePods is how many sidecars (the busy one first) carry the latency probes.
const probePods = 10

// env is what every scenario shares.
type env struct {
	options
	dir, bin, creds string
	cert            cert // the lease endpoint's
	redis           *redis
	up              hosts
	partner         *upstream
	// steady is the probes' latency in the 10-pod steady run's window that
	// the kill scenario kills a replica in (its baseline).
	steady *probeWindow
}

func benchmark(o options) int {
	e, cleanup, err := setup(o)
	defer cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("via %s; R = %.0f/s, burst %d, demand %.2g R, skew 10:1, %s per scenario, requests wait up to %s for a send time; "+
		"each sidecar a process with GOMAXPROCS=1; %d CPUs; load average at the start %s\n\n",
		o.via, o.rate, o.burst, o.demand, o.duration, maxWait, cpus(), loadavg())
	fmt.Printf("| scenario | pods | admitted (%% of R) | max in any 1 s (R + burst = %d) | busy pod admitted (%% of its demand) | quota's wait in the sidecar p50 / p99 (spare quota) | added latency at the client p50 / p99 (quota − none) | sidecar latency without quota p50 / p99 | lease ops/s per pod (mean / max) | lease latency p50 / p99 (mean) | endpoint answers/s per pod (other than 200) | sidecars' CPU (of 2) | endpoint replicas / balancer / Redis CPU | load avg |\n",
		int(o.rate)+o.burst)
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, sc := range e.scenarios() {
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

// scenarios are the runs -pods and -scenarios ask for: the steady ones per
// fleet size, and the 10-pod ones (growth, outages) after the first size,
// before the larger ones, which take this 2-CPU machine close to its limit
// (docs/performance.md#shared-quota).
func (e *env) scenarios() []scenario {
	var runs []scenario
	events := []scenario{{name: "grow", kind: "grow", pods: 10, grow: 10, shared: true},
		{name: "loss", kind: "loss", pods: 10, shared: true, outage: e.outage, stops: stopStore},
		{name: "down", kind: "down", pods: 10, shared: true, outage: e.outage, stops: stopEndpoint},
		{name: "kill", kind: "kill", pods: 10, shared: true, stops: killReplica}}
	for i, n := range e.pods {
		runs = append(runs, scenario{name: fmt.Sprintf("shared%d", n), kind: "shared", pods: n, shared: true},
			scenario{name: fmt.Sprintf("split%d", n), kind: "split", pods: n})
		if i == 0 {
			runs = append(runs, events...)
		}
	}
	if len(e.pods) == 0 {
		runs = events
	}
	return slices.DeleteFunc(runs, func(sc scenario) bool { return !e.kinds[sc.kind] })
}

// setup builds the sidecar, writes the lease endpoint's certificate and
// starts Redis and the upstreams; cleanup stops what was started.
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
	if e.cert, err = newCert(e.dir); err != nil {
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

// What a scenario stops from a third of its run.
const (
	stopNothing  = iota
	stopStore    // Redis, for the outage (a restart without persistence)
	stopEndpoint // every lease endpoint replica, for the outage
	killReplica  // one lease endpoint replica of two, for good
)

type scenario struct {
	name   string
	kind   string // of kinds
	pods   int
	grow   int // sidecars added at half time
	shared bool
	stops  int
	outage time.Duration
}

type result struct {
	sc               scenario
	admitted, maxWin int
	warmMax          int      // the most in any 1 s of the warm-up
	waits            [2]waits // the partner's and the spare quota's admission waits in the sidecars
	lease            waits    // the partner's lease operations by latency
	leaseMean        time.Duration
	busyPct          float64
	added, base      [2]time.Duration // p50, p99
	opsMean, opsMax  float64
	answers          map[string]float64 // the endpoint's answers per second per pod, by code
	load             string
	cpu              float64 // the sidecars' CPU time over the warm-up's and the measured run's, in CPUs
	epCPU, lbCPU     float64 // the lease endpoint's replicas' and balancer's, likewise
	redisCPU         float64
	notes            []string
}

func (r result) print(e *env) {
	name := map[bool]string{true: "shared quota", false: "per-pod split (today)"}[r.sc.shared]
	pods := strconv.Itoa(r.sc.pods)
	switch {
	case r.sc.grow > 0:
		name += ", pods added at half time"
		pods = fmt.Sprintf("%d → %d", r.sc.pods, r.sc.pods+r.sc.grow)
	case r.sc.stops == stopStore:
		name += fmt.Sprintf(", Redis stopped %s", r.sc.outage)
	case r.sc.stops == stopEndpoint:
		name += fmt.Sprintf(", every endpoint replica stopped %s", r.sc.outage)
	case r.sc.stops == killReplica:
		name += fmt.Sprintf(", one endpoint replica of %d killed", replicaCount)
	}
	ops, lease, answers, epCPU := "0", "–", "–", "–"
	if r.sc.shared {
		ops = fmt.Sprintf("%.1f / %.1f", r.opsMean, r.opsMax)
		lease = r.lease.latency() + " (" + r.leaseMean.Round(time.Microsecond).String() + ")"
	}
	if r.answers != nil {
		all, others := 0.0, []string{}
		for _, code := range slices.Sorted(maps.Keys(r.answers)) {
			all += r.answers[code]
			if code != "200" && r.answers[code] > 0 {
				others = append(others, fmt.Sprintf("%s: %.2f", code, r.answers[code]))
			}
		}
		answers = fmt.Sprintf("%.1f (%s)", all, cmp.Or(strings.Join(others, ", "), "all 200"))
		epCPU = fmt.Sprintf("%.2f / %.2f", r.epCPU, r.lbCPU)
	}
	fmt.Printf("| %s | %s | %.1f %% | %d (warm-up %d) | %.1f %% | %s | %s / %s | %s / %s | %s | %s | %s | %.2f | %s / %.2f | %s |\n", name, pods,
		100*float64(r.admitted)/(e.rate*e.duration.Seconds()), r.maxWin, r.warmMax, r.busyPct, r.waits[1],
		signed(r.added[0]), signed(r.added[1]), r.base[0].Round(time.Microsecond), r.base[1].Round(time.Microsecond),
		ops, lease, answers, r.cpu, epCPU, r.redisCPU, r.load)
}

func signed(d time.Duration) string {
	d = d.Round(time.Microsecond)
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
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
