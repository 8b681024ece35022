package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrydev/retry-operator/test/e2e/grpcraw"
	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// grpcCallHandler serves /grpc-call: one unary call, dialled directly as an
// app without proxy settings does (transparent interception carries it to the
// sidecar), and the upstream's record of its arrivals fetched over HTTP on
// port 80 of the same host.
//
//	GET /grpc-call?target=flaky-upstream.demo.svc:9090&method=/e2e.Flaky/Get&steps=UNAVAILABLE,OK[&id=I][&timeout=10s]
func grpcCallHandler(log *slog.Logger, direct *http.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		host, _, err := net.SplitHostPort(q.Get("target"))
		timeout, terr := time.ParseDuration(q.Get("timeout"))
		if q.Get("timeout") == "" {
			timeout, terr = 30*time.Second, nil
		}
		if err != nil || terr != nil || q.Get("method") == "" {
			http.Error(w, "want target (host:port), method (/package.Service/Method) and optionally timeout (a duration)", http.StatusBadRequest)
			return
		}
		id := q.Get("id")
		if id == "" {
			id = newID()
		}
		rep := wire.GRPCReport{RequestID: id, Method: q.Get("method"), Target: q.Get("target"), Trailers: map[string]string{}, StartedAt: time.Now().UTC()}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", id, "x-steps", q.Get("steps"))
		callGRPC(ctx, &rep)
		rep.ElapsedMillis = time.Since(rep.StartedAt).Milliseconds()
		rep.Arrivals = arrivals(r.Context(), direct, host, id)
		log.Info("grpc-call", "requestId", id, "method", rep.Method, "code", rep.Code,
			"outcome", rep.Trailers["x-retry-outcome"], "elapsedMillis", rep.ElapsedMillis)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// callGRPC makes the call on a connection of its own and fills in the status
// and the trailers the suite reads.
func callGRPC(ctx context.Context, rep *wire.GRPCReport) {
	conn, err := grpc.NewClient("passthrough:///"+rep.Target,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcraw.Codec{})))
	if err != nil {
		rep.Code, rep.Message = "client error", err.Error()
		return
	}
	defer conn.Close()
	req, resp := []byte(`{"order":42}`), []byte(nil)
	var trailer metadata.MD
	st := status.Convert(conn.Invoke(ctx, rep.Method, &req, &resp, grpc.Trailer(&trailer)))
	rep.Code, rep.Message = st.Code().String(), st.Message()
	for _, k := range []string{"x-retry-outcome", "x-retry-attempts", "x-retry-not-before", "grpc-retry-pushback-ms"} {
		if v := trailer.Get(k); len(v) > 0 {
			rep.Trailers[k] = v[0]
		}
	}
}

// arrivals asks the flaky upstream, directly on port 80, for the arrivals of
// request id; none when it does not answer.
func arrivals(ctx context.Context, direct *http.Client, host, id string) []wire.Arrival {
	u := &url.URL{Scheme: "http", Host: host, Path: "/arrivals", RawQuery: "id=" + url.QueryEscape(id)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil
	}
	resp, err := direct.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out []wire.Arrival
	_ = json.Unmarshal(b, &out) // a bad answer leaves no arrivals
	return out
}
