package retrygrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retrygrpc"
)

// BenchmarkUnaryCall is a health check on 127.0.0.1 answered OK at once,
// without and with the interceptor: the difference is what the interceptor
// costs a call that needs no retry.
func BenchmarkUnaryCall(b *testing.B) {
	p := policy(b, nil)
	for name, opts := range map[string][]grpc.DialOption{
		"no interceptor": nil,
		"interceptor":    {grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(p))},
	} {
		b.Run(name, func(b *testing.B) {
			_, addr := startServer(b, nil)
			conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			req := &healthpb.HealthCheckRequest{}
			if _, err := client.Check(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
