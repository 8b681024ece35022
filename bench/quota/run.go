package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// trial is one scenario's run: its fleet, its lease endpoint (nil in file
// mode and without a shared quota), its load and what it noted.
type trial struct {
	*env
	sc           scenario
	config       func(i int, name string) ([]string, error) // sidecar i's flags
	fleet        []*sidecar
	ep           *endpoint
	rec          *recorder
	begin, start time.Time // of the load (the warm-up) and of the measured run
	ctx          context.Context
	wg           sync.WaitGroup
	later        []func() string // notes of the event, once the run is over
}

// run starts the scenario's sidecars (and lease endpoint), drives them for
// the duration and measures.
func (e *env) run(sc scenario) (result, error) {
	t := &trial{env: e, sc: sc}
	defer t.stop()
	if err := t.startFleet(); err != nil {
		return result{sc: sc}, err
	}
	// The sidecars' counters are read before the load starts and after it
	// ends, so their columns cover the warm-up too: a read costs a sidecar
	// about 3 ms of CPU (32 KB of /metrics), and the 50-pod fleet takes 2
	// CPUs close to their limit; 150 reads at once at the start of a
	// measured run stalled it for 6 s (arrivals 60-90 % of R), and 50 reads
	// 20 ms apart in the warm-up tipped it into collapse once in three runs.
	before := t.snapshot()
	t.begin = time.Now().Add(500 * time.Millisecond)
	t.start = t.begin.Add(e.warmup)
	t.rec = &recorder{start: t.start}
	e.partner.reset(t.begin, e.warmup)
	ctx, cancel := context.WithDeadline(context.Background(), t.start.Add(e.duration))
	defer cancel()
	t.ctx = ctx
	for i, s := range t.fleet {
		t.load(i, s, t.begin)
	}
	time.Sleep(time.Until(t.start))
	load0 := loadavg()
	if err := t.event(); err != nil {
		cancel()
		t.wg.Wait()
		return result{sc: sc}, err
	}
	t.profiles()
	<-ctx.Done()
	after := t.snapshot()
	res := t.measure(before, after)
	if verbose {
		t.dump(res, after.bodies)
	}
	res.load = load0 + " → " + loadavg()
	t.wg.Wait()
	t.tally(&res)
	return res, nil
}

// startFleet writes the scenario's configuration, starts its lease endpoint
// when the sidecars lease through it, and its sidecars.
func (t *trial) startFleet() error {
	var quotas []v1alpha1.SharedQuota
	if t.sc.shared {
		quotas = quotasOf(t.sc.name, t.rate, t.burst, t.redis.addr)
	}
	policy, err := policyFile(t.dir, t.sc.name, t.up, quotas, t.sc.pods, t.rate, t.burst)
	if err != nil {
		return err
	}
	t.config = func(int, string) ([]string, error) {
		return []string{"--policy-file=" + policy, "--quota-credentials-file=" + t.creds}, nil
	}
	if t.sc.shared && t.via == viaEndpoint {
		qf, err := writeQuotas(t.dir, t.sc.name, quotas)
		if err != nil {
			return err
		}
		if t.ep, err = t.startEndpoint(t.sc.name, qf, t.sc.pods+t.sc.grow); err != nil {
			return err
		}
		doc, err := leaseDocument(policy, t.ep.lb.ready.Addr, t.cert.pem)
		if err != nil {
			return err
		}
		t.config = func(i int, name string) ([]string, error) {
			d, err := configDir(t.dir, name, doc, i)
			return []string{"--config-dir=" + d}, err
		}
	}
	if t.fleet, err = startSidecars(t.bin, t.dir, t.sc.name, 0, t.sc.pods, t.config); err != nil {
		return err
	}
	if t.sc.shared && waitAll(t.fleet, t.reachable(), 10*time.Second) < 0 {
		return fmt.Errorf("the sidecars did not reach the store within 10 s")
	}
	return nil
}

func (t *trial) reachable() string {
	return fmt.Sprintf(`retry_sidecar_quota_store_state{quota="partner-%s",state="reachable"}`, t.sc.name)
}

func (t *trial) stop() {
	for _, s := range t.fleet {
		s.kill()
	}
	if t.ep != nil {
		t.ep.stop()
	}
}

// load drives sidecar i from at: its part of the partner's demand, and the
// probes if it is one of the first probePods.
func (t *trial) load(i int, s *sidecar, at time.Time) {
	w := 1.0
	if i == 0 {
		w = 10
	}
	weights := float64(10 + t.sc.pods - 1)
	drive(t.ctx, &t.wg, s, i, toPartner, t.up.partner, t.demand*t.rate*w/weights, at, t.rec)
	// The probes go to the first probePods sidecars only: the spare
	// quota's clients in the others stay idle (a lease a second), so the
	// probes do not double the fleet's lease operations.
	if i < probePods {
		probe := t.probe / float64(min(t.sc.pods+t.sc.grow, probePods))
		drive(t.ctx, &t.wg, s, i, toSpare, t.up.spare, probe, at, t.rec)
		drive(t.ctx, &t.wg, s, i, toDirect, t.up.direct, probe, at, t.rec)
	}
}

// event is what happens during the measured run: pods added, the store or
// the endpoint stopped, a replica killed.
func (t *trial) event() error {
	switch {
	case t.sc.grow > 0:
		return t.growAt(t.duration / 2)
	case t.sc.stops == stopStore, t.sc.stops == stopEndpoint:
		return t.outageAt(t.duration / 3)
	case t.sc.stops == killReplica:
		return t.killAt(t.duration / 3)
	}
	return nil
}

func (t *trial) growAt(at time.Duration) error {
	time.Sleep(time.Until(t.start.Add(at)))
	more, err := startSidecars(t.bin, t.dir, t.sc.name, t.sc.pods, t.sc.grow, t.config)
	if err != nil {
		return err
	}
	joined := time.Since(t.start)
	for i, s := range more {
		t.load(t.sc.pods+i, s, time.Now())
	}
	t.fleet = append(t.fleet, more...)
	t.later = append(t.later, func() string {
		n, most := t.partner.sum(joined+time.Second, t.duration)
		return fmt.Sprintf("%d → %d pods: the added sidecars were serving %s after the start; from 1 s later to the end: admitted %.1f %% of R, max in any 1 s %d",
			t.sc.pods, t.sc.pods+t.sc.grow, joined.Round(time.Millisecond), 100*float64(n)/(t.rate*(t.duration-joined-time.Second).Seconds()), most)
	})
	return nil
}

// outageAt stops Redis or every lease endpoint replica at from, for the
// outage, starts it again and waits for every sidecar to be reachable.
func (t *trial) outageAt(from time.Duration) error {
	time.Sleep(time.Until(t.start.Add(from)))
	what := "Redis"
	if t.sc.stops == stopStore {
		t.redis.stop()
	} else {
		what = "every lease endpoint replica"
		for i := range t.ep.replicas {
			t.ep.stopReplica(i)
		}
	}
	time.Sleep(t.sc.outage)
	var err error
	if t.sc.stops == stopStore {
		err = t.redis.start()
	} else {
		for _, r := range t.ep.replicas {
			if err = r.start(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("starting %s again: %w", what, err)
	}
	back := time.Now()
	inStep := waitAll(t.fleet, t.reachable(), 5*time.Second)
	t.later = append(t.later, func() string { return t.outageNote(what, from, inStep, back.Sub(t.start)) })
	return nil
}

// killWindow is how long after a replica is killed the kill scenario looks
// at the probes and the sidecars' waits.
const killWindow = 2 * time.Second

// killAt kills one lease endpoint replica at at, for good (it stays in the
// balancer's rotation), reading the sidecars' counters just before and
// killWindow after.
func (t *trial) killAt(at time.Duration) error {
	time.Sleep(time.Until(t.start.Add(at)))
	before, _ := scrape(t.fleet)
	t.ep.stopReplica(0)
	killed := time.Since(t.start)
	time.Sleep(killWindow)
	after, _ := scrape(t.fleet)
	t.later = append(t.later, func() string { return t.killNote(killed, before, after) })
	return nil
}

// profiles writes -sidecar-profiles from the middle of the run.
func (t *trial) profiles() {
	if profileDir == "" {
		return
	}
	time.Sleep(time.Until(t.start.Add(t.duration/2 - 2500*time.Millisecond)))
	var pw sync.WaitGroup
	for i := range min(2, len(t.fleet)) {
		pw.Go(func() {
			path := fmt.Sprintf("%s/%s-%d.pprof", profileDir, t.sc.name, i)
			if err := t.fleet[i].profile(path, 5*time.Second); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			}
		})
	}
	pw.Wait()
}

// dump prints, with -v, the wait histograms, the slow probes, each
// sidecar's partner series and the arrivals per second.
func (t *trial) dump(res result, bodies [][]byte) {
	fmt.Fprintf(os.Stderr, "%s: admissions by wait in the sidecars (bound in s: count), partner %v, spare %v\n",
		t.sc.name, res.waits[0].buckets(), res.waits[1].buckets())
	slow := func(s sample) bool { return s.lat > 20*time.Millisecond }
	probes := append(t.rec.samples(toSpare, -t.warmup, t.duration, slow), t.rec.samples(toDirect, -t.warmup, t.duration, slow)...)
	slices.SortFunc(probes, func(a, b sample) int { return int(a.at - b.at) })
	for _, s := range probes {
		fmt.Fprintf(os.Stderr, "%s: a probe to %s sent at %s took %s (pod %d, status %d)\n", t.sc.name,
			map[int]string{toSpare: "the spare quota", toDirect: "no quota"}[s.to], s.at.Round(time.Millisecond), s.lat.Round(time.Millisecond), s.pod, s.status)
	}
	dump(bodies, "partner-"+t.sc.name)
	fmt.Fprintf(os.Stderr, "%s: arrivals per second at the upstream: %v\n", t.sc.name, t.partner.perSecond(t.duration))
}
