// Command loadgen is the fixed-rate load generator of `make bench-sidecar`
// (bench/sidecar/run.sh). All load is bounded in count and time, and it refuses
// any target other than 127.0.0.1 / ::1.
//
//	loadgen rate   -url http://127.0.0.1:18080/ [-proxy 127.0.0.1:18090] -rate 2000 -duration 5s
//	    open loop: one request every 1/rate seconds, latency measured from the moment
//	    each is sent (as vegeta does); prints {"sent","errors","p50_us","p99_us",...}
//	loadgen outage -listen 127.0.0.1:18084 -proxy 127.0.0.1:18091 -rate 1000 -duration 5s
//	    serves 503 to everything on -listen, sends rate·duration logical requests
//	    through the proxy and prints {"logical","attempts","amplification"}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen rate|outage [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "rate":
		err = rate(os.Args[2:])
	case "outage":
		err = outage(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func loopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: only 127.0.0.1 / ::1 targets are allowed", hostport)
	}
	return nil
}

func client(proxy string, conns int) (*http.Client, error) {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true, IdleConnTimeout: time.Minute}
	if proxy != "" {
		if err := loopback(proxy); err != nil {
			return nil, err
		}
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}

// run sends n requests at a fixed rate; each is handled by its own goroutine so a
// slow response never delays the next send (open loop). It returns the latencies
// of the successful ones and the error count.
func run(c *http.Client, target string, n int, every time.Duration, max time.Duration) ([]time.Duration, int64) {
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			t0 := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				errs.Add(1)
				lat[i] = -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if resp.StatusCode >= 500 && resp.StatusCode != 503 {
				errs.Add(1)
			}
		}(i)
	}
	wg.Wait()
	out := lat[:0]
	for _, l := range lat {
		if l > 0 {
			out = append(out, l)
		}
	}
	return out, errs.Load()
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return float64(sorted[i].Microseconds())
}

func rate(args []string) error {
	fs := flag.NewFlagSet("rate", flag.ExitOnError)
	target := fs.String("url", "", "target URL (127.0.0.1 only)")
	proxy := fs.String("proxy", "", "forward proxy host:port (absolute-form requests)")
	r := fs.Int("rate", 2000, "requests per second")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	warm := fs.Int("warmup", 400, "requests sent first at the same rate, not measured")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil {
		return err
	}
	if err := loopback(u.Host); err != nil {
		return err
	}
	if *r <= 0 || *r > 50000 || *dur <= 0 || *dur > time.Minute {
		return errors.New("rate must be 1..50000 and duration at most 1m")
	}
	c, err := client(*proxy, 512)
	if err != nil {
		return err
	}
	every := time.Second / time.Duration(*r)
	run(c, *target, *warm, every, *dur+10*time.Second)
	n := int(*dur / every)
	lat, errs := run(c, *target, n, every, *dur+10*time.Second)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"sent": n, "ok": len(lat), "errors": errs,
		"p50_us": pct(lat, 0.50), "p90_us": pct(lat, 0.90), "p99_us": pct(lat, 0.99), "max_us": pct(lat, 1),
	})
}

func outage(args []string) error {
	fs := flag.NewFlagSet("outage", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18084", "address of the always-503 upstream")
	proxy := fs.String("proxy", "", "forward proxy host:port")
	r := fs.Int("rate", 1000, "logical requests per second")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := loopback(*listen); err != nil {
		return err
	}
	if *r <= 0 || *r > 20000 || *dur <= 0 || *dur > time.Minute {
		return errors.New("rate must be 1..20000 and duration at most 1m")
	}
	var attempts atomic.Int64
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, err := client(*proxy, 512)
	if err != nil {
		return err
	}
	every := time.Second / time.Duration(*r)
	n := int(*dur / every)
	_, errs := run(c, "http://"+*listen+"/outage", n, every, *dur+30*time.Second)
	a := attempts.Load()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"logical": n, "attempts": a, "errors": errs, "amplification": float64(a) / float64(n),
	})
}
