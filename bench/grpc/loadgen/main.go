// Command loadgen is the load generator of `make bench-grpc`
// (bench/grpc/run.sh): a grpc-go client making unary calls of the health
// service (/grpc.health.v1.Health/Check) over -conns HTTP/2 cleartext
// connections to -addr, with -authority as the calls' :authority (the sidecar
// routes a call by it to its policy's upstream). Every load is bounded in time
// and count, and only 127.0.0.1 / ::1 addresses are accepted.
//
//	loadgen closed -addr A -authority U -conns 4 -concurrency 16 -duration 5s
//	    closed loop: conns × concurrency callers, each making its next call as
//	    soon as its last returned, after a -warmup at the same load;
//	    prints {"calls","errors","calls_per_s","p50_us","p99_us",...}
//	loadgen rate -addr A -authority U -conns 4 -rate 2000 -duration 5s
//	    open loop: one call every 1/rate seconds, each from its own goroutine,
//	    round-robin over the connections, after -warmup calls at the same rate;
//	    latency from each call's send; prints {"sent","ok","errors","p50_us",...}
//	loadgen once -addr A -authority U
//	    one call; prints its answer and the x-retry-* trailers it carried
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// callTimeout bounds each call: a stuck proxy costs an error, not the run.
const callTimeout = 10 * time.Second

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen closed|rate|once [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "closed":
		err = closed(os.Args[2:])
	case "rate":
		err = rate(os.Args[2:])
	case "once":
		err = once(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// target is where the calls go and how many connections carry them.
type target struct {
	addr, authority string
	conns           int
}

func (t *target) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.addr, "addr", "", "host:port the connections go to (the proxy, or the server itself)")
	fs.StringVar(&t.authority, "authority", "", "the calls' :authority (default -addr)")
	fs.IntVar(&t.conns, "conns", 4, "HTTP/2 connections")
}

func (t *target) check() error {
	if t.authority == "" {
		t.authority = t.addr
	}
	for _, a := range []string{t.addr, t.authority} {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("%s: only 127.0.0.1 / ::1 addresses are allowed", a)
		}
	}
	if t.conns < 1 || t.conns > 256 {
		return errors.New("conns must be 1..256")
	}
	return nil
}

// dial opens the connections, each a grpc-go ClientConn of its own (one
// HTTP/2 connection each), and makes one call on each so that none is
// measured while it connects.
func (t *target) dial() ([]healthpb.HealthClient, func(), error) {
	var ccs []*grpc.ClientConn
	closeAll := func() {
		for _, cc := range ccs {
			cc.Close()
		}
	}
	var clients []healthpb.HealthClient
	for range t.conns {
		cc, err := grpc.NewClient("passthrough:///"+t.authority,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", t.addr)
			}))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ccs = append(ccs, cc)
		c := healthpb.NewHealthClient(cc)
		if err := call(context.Background(), c); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("first call: %w", err)
		}
		clients = append(clients, c)
	}
	return clients, closeAll, nil
}

var errNotServing = errors.New("answer is not SERVING")

// call makes one health check and requires SERVING.
func call(ctx context.Context, c healthpb.HealthClient, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return errNotServing
	}
	return nil
}

// result is what a measurement prints.
type result struct {
	Calls     int     `json:"calls"`
	OK        int     `json:"ok"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	CallsPerS float64 `json:"calls_per_s"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
}

func summarize(lat []time.Duration, calls int, errs int64, took time.Duration) result {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(float64(len(lat)-1)*p)].Nanoseconds()) / 1e3
	}
	return result{
		Calls: calls, OK: len(lat), Errors: errs, Seconds: took.Seconds(),
		CallsPerS: float64(len(lat)) / took.Seconds(),
		P50us:     pct(0.50), P90us: pct(0.90), P99us: pct(0.99), MaxUs: pct(1),
	}
}
