// Command trace-receiver is the tracing backend of `make demo`: an OTLP
// receiver (HTTP/protobuf on --listen, gRPC on --grpc-listen) that prints
// each trace as a span tree once no span of it has arrived for --quiet
// (docs/observability.md#tracing).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
)

func main() {
	listen := flag.String("listen", ":4318", "OTLP/HTTP address (POST /v1/traces)")
	grpcListen := flag.String("grpc-listen", ":4317", "OTLP/gRPC address; empty: none")
	quiet := flag.Duration("quiet", time.Second, "a trace is printed once no span of it arrived for this long")
	flag.Parse()
	if err := run(*listen, *grpcListen, *quiet); err != nil {
		log.Fatal(err)
	}
}

func run(listen, grpcListen string, quiet time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	recv := otlpreceiver.New()
	mux := http.NewServeMux()
	mux.Handle("/v1/traces", recv)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Printf("trace-receiver: OTLP/HTTP: %v", err)
		}
	}()
	defer srv.Close()
	if grpcListen != "" {
		gln, err := lc.Listen(ctx, "tcp", grpcListen)
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		recv.RegisterGRPC(gs)
		go func() {
			if err := gs.Serve(gln); err != nil {
				log.Printf("trace-receiver: OTLP/gRPC: %v", err)
			}
		}()
		defer gs.Stop()
	}
	log.Printf("trace-receiver: OTLP/HTTP on %s, OTLP/gRPC on %s", listen, grpcListen)
	printTraces(ctx, recv, quiet)
	return nil
}

// printTraces prints every trace once, when it is whole and has been quiet
// for quiet: the sidecar exports a span when it ends, so an attempt's CLIENT
// span arrives before a Retry-After wait and the SERVER span only after the
// last attempt. A trace counts as whole once its SERVER span is in; one that
// never gets one (an in-process client's) is printed after 10 × quiet.
func printTraces(ctx context.Context, recv *otlpreceiver.Receiver, quiet time.Duration) {
	printed := map[string]bool{}
	lastSeen := map[string]time.Time{}
	hasServer := map[string]bool{}
	seen := 0
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			spans := recv.Spans()
			for _, s := range spans[seen:] {
				id := string(s.GetTraceId())
				lastSeen[id] = now
				if s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
					hasServer[id] = true
				}
			}
			seen = len(spans)
			for id, at := range lastSeen {
				wait := 10 * quiet
				if hasServer[id] {
					wait = quiet
				}
				if printed[id] || now.Sub(at) < wait {
					continue
				}
				printed[id] = true
				var trace []otlpreceiver.Span
				for _, s := range spans {
					if string(s.GetTraceId()) == id {
						trace = append(trace, s)
					}
				}
				fmt.Println(otlpreceiver.Tree(trace))
			}
		}
	}
}
