// Command server is the gRPC upstream of `make bench-grpc` (bench/grpc/run.sh):
// a grpc-go server on a 127.0.0.1 address, HTTP/2 cleartext, answering the
// standard health service's unary Check (/grpc.health.v1.Health/Check) with
// SERVING: an empty request message and a 2-byte answer (5 and 7 bytes on the
// wire with their length prefix).
// It stops by itself after -lifetime, so a run that dies leaves nothing
// listening for long.
//
//	server -listen 127.0.0.1:18180 -lifetime 30m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18180", "address to serve on (127.0.0.1 / ::1 only)")
	lifetime := flag.Duration("lifetime", 30*time.Minute, "stop after this long")
	flag.Parse()
	if err := serve(*listen, *lifetime); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func serve(listen string, lifetime time.Duration) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: only 127.0.0.1 / ::1 addresses are allowed", listen)
	}
	if lifetime <= 0 || lifetime > 2*time.Hour {
		return errors.New("lifetime must be in (0, 2h]")
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer()) // answers SERVING for the empty service name
	time.AfterFunc(lifetime, srv.Stop)
	return srv.Serve(ln)
}
