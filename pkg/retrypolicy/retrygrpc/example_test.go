package retrygrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retrygrpc"
)

// A health check that the server answers UNAVAILABLE once is retried and
// succeeds on the second attempt.
func Example() {
	addr := flakyHealthServer()

	policy, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "health", Hosts: []string{addr}, MaxAttempts: 3, Deadline: 5 * time.Second,
		Backoff:           retrypolicy.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: retrypolicy.JitterFull},
		RetryOnGRPCStatus: []uint32{uint32(codes.Unavailable), uint32(codes.ResourceExhausted)},
		ReplayableMethods: []string{"/grpc.health.v1.Health/*"},
		RetryAfterMaxWait: 2 * time.Second,
	})
	if err != nil {
		panic(err) // a field out of range, named by its path
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy,
			retrygrpc.WithRandom(func() float64 { return 0 })))) // full jitter at its floor: no wait
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var rep retrygrpc.Report
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, retrygrpc.ReportTo(&rep))
	fmt.Println(resp.GetStatus(), err, rep.Attempts, rep.Outcome)
	// Output: SERVING <nil> 2 success
}

// flakyHealthServer serves the health service on 127.0.0.1, answering the
// first call UNAVAILABLE.
func flakyHealthServer() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	var calls atomic.Int32
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if calls.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "warming up")
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	return lis.Addr().String()
}
