package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// The upstreams a request goes to.
const (
	toPartner = iota
	toSpare
	toDirect
)

// sample is one request the load generator sent through a sidecar.
type sample struct {
	at     time.Duration // sent, since the run's start
	lat    time.Duration // until the whole response was read
	status int           // 0: the request failed
	pod    int
	to     int
}

// recorder keeps every sample of a run.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	s     []sample
}

func (r *recorder) add(s sample) { r.mu.Lock(); r.s = append(r.s, s); r.mu.Unlock() }

// samples returns those sent to to from pods in [from, until), sorted by latency.
func (r *recorder) samples(to int, from, until time.Duration, keep func(sample) bool) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	for _, s := range r.s {
		if s.to == to && s.at >= from && s.at < until && (keep == nil || keep(s)) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sample) int { return int(a.lat - b.lat) })
	return out
}

// quantile of samples sorted by latency (0 if none).
func quantile(s []sample, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1))].lat
}

// drive sends requests for host through sc at rate per second, evenly spaced
// from at until ctx ends, each in its own goroutine (an open loop: a slow
// answer does not slow the arrivals), and records them.
func drive(ctx context.Context, wg *sync.WaitGroup, sc *sidecar, pod, to int, host string, rate float64, at time.Time, rec *recorder) {
	if rate <= 0 {
		return
	}
	gap := time.Duration(float64(time.Second) / rate)
	url := "http://" + host + "/"
	wg.Go(func() {
		for next := at; ctx.Err() == nil; {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			for now := time.Now(); !next.After(now) && ctx.Err() == nil; next = next.Add(gap) {
				sent := next
				wg.Go(func() { rec.add(send(sc, url, host, sent, pod, to, rec.start)) })
			}
		}
	})
}

func send(sc *sidecar, url, host string, sent time.Time, pod, to int, start time.Time) sample {
	s := sample{at: sent.Sub(start), pod: pod, to: to}
	t0 := time.Now()
	s.status, _ = sc.client.get(url, host)
	s.lat = time.Since(t0)
	return s
}
