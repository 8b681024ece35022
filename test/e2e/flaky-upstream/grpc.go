package main

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/test/e2e/grpcraw"
	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// serveGRPC serves every gRPC method on addr (cleartext HTTP/2), scripted by
// the call's metadata and recorded like the HTTP paths, under the method as
// the arrival's path:
//
//	x-request-id  the logical call, as X-Request-Id for HTTP
//	x-steps       the script (grpcraw.ParseSteps): arrival n answers step n
//
// An OK step echoes the request message.
func serveGRPC(addr string, rec *recorder, log *slog.Logger) error {
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(grpcraw.Codec{}),
		grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error { return answerGRPC(st, rec, log) }))
	log.Info("flaky-upstream listening (gRPC)", "addr", addr)
	return srv.Serve(lis)
}

func answerGRPC(st grpc.ServerStream, rec *recorder, log *slog.Logger) error {
	method, _ := grpc.MethodFromServerStream(st)
	md, _ := metadata.FromIncomingContext(st.Context())
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var msg []byte
	if err := st.RecvMsg(&msg); err != nil {
		return err
	}
	id := first("x-request-id")
	steps, err := grpcraw.ParseSteps(first("x-steps"))
	if err != nil {
		return status.Error(codes.InvalidArgument, "x-steps: "+err.Error())
	}
	seen := 0
	for _, a := range rec.get(id) {
		if a.Path == method {
			seen++
		}
	}
	step := steps[min(seen, len(steps)-1)]
	a := wire.Arrival{Path: method, Method: "POST", At: time.Now().UTC(), Attempt: first("x-retry-attempt"),
		BodyBytes: len(msg), Status: 200, GRPCCode: step.Code.String(), RetryAfter: step.Pushback}
	n := rec.add(id, a)
	log.Info("arrival", "path", method, "requestId", id, "attempt", a.Attempt, "grpcCode", a.GRPCCode)
	if step.Code == codes.OK {
		return st.SendMsg(&msg)
	}
	if step.AfterHeaders {
		if err := st.SendHeader(metadata.MD{}); err != nil {
			return err
		}
	}
	if step.Pushback != "" {
		st.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", step.Pushback))
	}
	return status.Error(step.Code, "flaky-upstream: arrival "+strconv.Itoa(n))
}
