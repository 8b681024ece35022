package main

import (
	"fmt"
	"time"
)

// snapshot is what a trial reads at each end of its load: every sidecar's
// /metrics (at the middle of the reads), and the CPU time and answers of
// the processes.
type snapshot struct {
	bodies                      [][]byte
	at                          time.Time
	cpu, epCPU, lbCPU, redisCPU time.Duration
	answers                     map[string]float64 // the lease endpoint's, by code
}

func (t *trial) snapshot() snapshot {
	var s snapshot
	s.bodies, s.at = scrape(t.fleet)
	s.cpu, s.redisCPU = fleetCPU(t.fleet), t.redis.cpuTime()
	if t.ep != nil {
		s.epCPU, s.lbCPU, s.answers = t.ep.cpuTime(), t.ep.lb.cpuTime(), t.ep.answers()
	}
	return s
}

// measure is what the sidecars' and the processes' counters say of the
// load, from snapshot b to a.
func (t *trial) measure(b, a snapshot) result {
	res := result{sc: t.sc}
	window := a.at.Sub(b.at).Seconds()
	res.cpu = (a.cpu - b.cpu).Seconds() / window
	res.epCPU, res.lbCPU = (a.epCPU-b.epCPU).Seconds()/window, (a.lbCPU-b.lbCPU).Seconds()/window
	res.redisCPU = (a.redisCPU - b.redisCPU).Seconds() / window
	partner, spare := "partner-"+t.sc.name, "spare-"+t.sc.name
	probing := min(probePods, len(b.bodies))
	res.waits = [2]waits{waitsOf(a.bodies, partner).minus(waitsOf(b.bodies, partner)),
		waitsOf(a.bodies[:probing], spare).minus(waitsOf(b.bodies[:probing], spare))}
	res.lease = histogramOf(a.bodies, leaseSeconds, partner).minus(histogramOf(b.bodies, leaseSeconds, partner))
	sum := func(bodies [][]byte) float64 { return total(values(bodies, leaseSeconds+`_sum{quota="`+partner+`"}`)) }
	if n := res.lease.total(); n > 0 {
		res.leaseMean = time.Duration((sum(a.bodies) - sum(b.bodies)) / n * float64(time.Second))
	}
	opsSeries := fmt.Sprintf(`retry_sidecar_quota_store_operations_total{quota="%s"}`, partner)
	ops0, ops1 := values(b.bodies, opsSeries), values(a.bodies, opsSeries)
	ops0 = append(ops0, make([]float64, len(ops1)-len(ops0))...) // the pods added at half time
	pods := float64(t.sc.pods) + float64(t.sc.grow)/2
	for i := range ops1 {
		res.opsMax = max(res.opsMax, (ops1[i]-ops0[i])/window)
	}
	res.opsMean = (total(ops1) - total(ops0)) / window / pods
	if t.ep != nil {
		res.answers = map[string]float64{}
		for code, n := range a.answers {
			res.answers[code] = (n - b.answers[code]) / window / pods
		}
	}
	return res
}

// leaseSeconds is the sidecars' histogram of their lease operations' latency.
const leaseSeconds = "retry_sidecar_quota_store_operation_seconds"

func total(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// tally counts the run at the upstream and the load generator once the
// load has ended, and writes the notes.
func (t *trial) tally(res *result) {
	res.admitted, res.maxWin = t.partner.sum(0, t.duration)
	_, res.warmMax = t.partner.sum(-t.warmup, 0)
	busy := t.rec.samples(toPartner, 0, t.duration, func(s sample) bool { return s.pod == 0 })
	ok := 0
	for _, s := range busy {
		if s.status == 200 {
			ok++
		}
	}
	res.busyPct = 100 * float64(ok) / float64(max(len(busy), 1))
	spare, direct := t.rec.samples(toSpare, 0, t.duration, nil), t.rec.samples(toDirect, 0, t.duration, nil)
	res.base = [2]time.Duration{quantile(direct, 0.5), quantile(direct, 0.99)}
	res.added = [2]time.Duration{quantile(spare, 0.5) - res.base[0], quantile(spare, 0.99) - res.base[1]}
	if t.sc.kind == "shared" && t.sc.pods == 10 {
		w := probesIn(t.rec, t.duration/3, t.duration/3+killWindow)
		t.steady = &w
	}
	for _, note := range t.later {
		res.notes = append(res.notes, note())
	}
	res.notes = append(res.notes, failures(t.sc, t.rec)...)
}

// outageNote is an outage scenario's line: admissions while what was
// stopped, the probes' latency then, and how long the fleet took to be back
// in step once it was started again (at restarted).
func (t *trial) outageNote(what string, from, inStep, restarted time.Duration) string {
	n, most := t.partner.sum(from, from+t.sc.outage)
	pct := 100 * float64(n) / (t.rate * t.sc.outage.Seconds())
	step := "not within 5 s"
	if inStep >= 0 {
		step = inStep.Round(time.Millisecond).String()
	}
	_, after := t.partner.sum(from+t.sc.outage, t.duration)
	return fmt.Sprintf("%s: %s stopped %s (from %s): admitted %.1f %% of R meanwhile (overshoot %+.1f %%), max in any 1 s %d (after the restart %d); "+
		"probes (p50 / max) meanwhile %s; every sidecar reachable again %s after the restart (at %s)",
		t.sc.name, what, t.sc.outage, from, pct, pct-100, most, after, probesIn(t.rec, from, from+t.sc.outage), step, restarted.Round(time.Millisecond))
}

// killNote is the kill scenario's line: in the killWindow after the kill,
// the spare quota's admissions by their wait in the sidecars, the failed
// lease operations and the probes, beside the steady run's probes in the
// same window and the probes' slowest from the kill to the end.
func (t *trial) killNote(killed time.Duration, before, after [][]byte) string {
	spare, partner := "spare-"+t.sc.name, "partner-"+t.sc.name
	probing := min(probePods, len(before))
	w := waitsOf(after[:probing], spare).minus(waitsOf(before[:probing], spare))
	failed := 0.0
	for _, q := range []string{partner, spare} {
		series := `retry_sidecar_quota_store_errors_total{quota="` + q + `",state="unreachable"}`
		failed += total(values(after, series)) - total(values(before, series))
	}
	steady := "no steady 10-pod run to compare"
	if t.steady != nil {
		steady = "the steady 10-pod run's probes in the same window " + t.steady.String()
	}
	return fmt.Sprintf("%s: one lease endpoint replica of %d killed at %s; in the %s after: the spare quota's admissions by wait in the sidecars %s "+
		"(%.0f waited more than 5 ms), lease operations failed %.0f, probes (p50 / max) %s; %s; probes from the kill to the end %s",
		t.sc.name, replicaCount, killed.Round(time.Millisecond), killWindow, w.buckets(), w.total()-w.atMost(5*time.Millisecond), failed,
		probesIn(t.rec, killed, killed+killWindow), steady, probesIn(t.rec, killed, t.duration))
}

// probeWindow is the latency of the probes sent in a window of a run: to
// the spare quota and to no quota, p50 and the slowest.
type probeWindow struct{ quota, none [2]time.Duration }

func probesIn(rec *recorder, from, until time.Duration) probeWindow {
	spare, direct := rec.samples(toSpare, from, until, nil), rec.samples(toDirect, from, until, nil)
	return probeWindow{quota: [2]time.Duration{quantile(spare, 0.5), quantile(spare, 1)},
		none: [2]time.Duration{quantile(direct, 0.5), quantile(direct, 1)}}
}

func (p probeWindow) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	return fmt.Sprintf("spare quota %s / %s, no quota %s / %s", r(p.quota[0]), r(p.quota[1]), r(p.none[0]), r(p.none[1]))
}
