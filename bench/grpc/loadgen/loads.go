package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

func closed(args []string) error {
	fs := flag.NewFlagSet("closed", flag.ExitOnError)
	var t target
	t.flags(fs)
	concurrency := fs.Int("concurrency", 16, "calls in flight on each connection")
	dur := fs.Duration("duration", 5*time.Second, "how long to measure")
	warm := fs.Duration("warmup", time.Second, "how long to run first at the same load, not measured")
	maxCalls := fs.Int("max-calls", 5_000_000, "stop after this many calls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	if *concurrency < 1 || *concurrency > 1024 || *dur <= 0 || *dur > time.Minute || *warm < 0 || *warm > time.Minute ||
		*maxCalls < 1 || *maxCalls > 50_000_000 {
		return errors.New("concurrency must be 1..1024, duration and warmup at most 1m, max-calls 1..50M")
	}
	clients, closeAll, err := t.dial()
	if err != nil {
		return err
	}
	defer closeAll()
	if *warm > 0 {
		closedLoop(clients, *concurrency, *warm, *maxCalls)
	}
	return json.NewEncoder(os.Stdout).Encode(closedLoop(clients, *concurrency, *dur, *maxCalls))
}

// closedLoop runs concurrency callers on each client until dur has passed or
// maxCalls calls were made.
func closedLoop(clients []healthpb.HealthClient, concurrency int, dur time.Duration, maxCalls int) result {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		all     []time.Duration
		errs    atomic.Int64
		started atomic.Int64
	)
	start := time.Now()
	end := start.Add(dur)
	for _, c := range clients {
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lat := make([]time.Duration, 0, 4096)
				for time.Now().Before(end) && started.Add(1) <= int64(maxCalls) {
					t0 := time.Now()
					if err := call(context.Background(), c); err != nil {
						errs.Add(1)
						continue
					}
					lat = append(lat, time.Since(t0))
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	took := time.Since(start)
	return summarize(all, len(all)+int(errs.Load()), errs.Load(), took)
}

func rate(args []string) error {
	fs := flag.NewFlagSet("rate", flag.ExitOnError)
	var t target
	t.flags(fs)
	r := fs.Int("rate", 2000, "calls per second")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	warm := fs.Int("warmup", 400, "calls sent first at the same rate, not measured")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	if *r < 1 || *r > 50000 || *dur <= 0 || *dur > time.Minute || *warm < 0 || *warm > 100000 {
		return errors.New("rate must be 1..50000, duration at most 1m, warmup 0..100000")
	}
	clients, closeAll, err := t.dial()
	if err != nil {
		return err
	}
	defer closeAll()
	every := time.Second / time.Duration(*r)
	openLoop(clients, *warm, every)
	return json.NewEncoder(os.Stdout).Encode(openLoop(clients, int(*dur/every), every))
}

// openLoop sends n calls, one every `every`, each from its own goroutine so
// that a slow answer never delays the next send, round-robin over clients.
func openLoop(clients []healthpb.HealthClient, n int, every time.Duration) result {
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func(i int, c healthpb.HealthClient) {
			defer wg.Done()
			t0 := time.Now()
			if err := call(context.Background(), c); err != nil {
				errs.Add(1)
				return
			}
			lat[i] = time.Since(t0)
		}(i, clients[i%len(clients)])
	}
	wg.Wait()
	took := time.Since(start)
	ok := lat[:0]
	for _, l := range lat {
		if l > 0 {
			ok = append(ok, l)
		}
	}
	return summarize(ok, n, errs.Load(), took)
}

func once(args []string) error {
	fs := flag.NewFlagSet("once", flag.ExitOnError)
	var t target
	t.flags(fs)
	if err := fs.Parse(append([]string{"-conns", "1"}, args...)); err != nil {
		return err
	}
	if err := t.check(); err != nil {
		return err
	}
	clients, closeAll, err := t.dial()
	if err != nil {
		return err
	}
	defer closeAll()
	var tr metadata.MD
	err = call(context.Background(), clients[0], grpc.Trailer(&tr))
	first := func(k string) string {
		if v := tr.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	answer := "SERVING"
	if err != nil {
		answer = err.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]string{
		"answer": answer, "x-retry-outcome": first("x-retry-outcome"), "x-retry-attempts": first("x-retry-attempts"),
	})
}
