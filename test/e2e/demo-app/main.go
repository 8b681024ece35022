// Command demo-app is the application of the demo and the end-to-end suite. It
// makes ordinary HTTP calls — through HTTP_PROXY, that is through the injected
// retry-sidecar — and reports what it saw, so a test (or a person) can compare the
// caller's view with the upstream's recorded arrivals.
//
//	GET /call?url=http://flaky-upstream.demo.svc/retry-after/2[&method=POST][&key=K][&id=I]
//
// answers JSON: the request id it sent (id, or a random one), status, the X-Retry-* headers, the elapsed
// time, and the upstream's arrivals for that request id (fetched without the proxy).
//
//	GET /load?url=http://flaky-upstream.demo.svc/ok/a&rate=30&seconds=20
//
// starts rate GETs a second for seconds (open loop: a slow answer does not slow the
// starts; at most maxInFlight at once), waits for every answer and answers JSON
// (wire.LoadReport): how many were sent and their answers by status and outcome.
//
//	GET /grpc-call?target=flaky-upstream.demo.svc:9090&method=/e2e.Flaky/Get&steps=UNAVAILABLE,OK
//
// makes one unary gRPC call, dialled directly (grpc.go), and answers JSON
// (wire.GRPCReport) joined with the upstream's arrivals for it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	// Calls go through HTTP_PROXY (the sidecar); the arrivals lookup goes direct so
	// it is not itself retried or counted.
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}, Timeout: 3 * time.Minute}
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /call", callHandler(log, viaProxy, direct))
	mux.HandleFunc("GET /load", loadHandler(log, viaProxy))
	mux.HandleFunc("GET /grpc-call", grpcCallHandler(log, direct))
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("demo-app listening", "addr", *listen)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// callHandler serves /call: one request through the sidecar (viaProxy), and
// the upstream's record of its arrivals fetched directly.
func callHandler(log *slog.Logger, viaProxy, direct *http.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		target, err := url.Parse(q.Get("url"))
		if err != nil || target.Scheme != "http" || target.Host == "" {
			http.Error(w, "url must be an absolute http:// URL", http.StatusBadRequest)
			return
		}
		method := strings.ToUpper(q.Get("method"))
		if method == "" {
			method = http.MethodGet
		}
		id := q.Get("id")
		if id == "" {
			id = newID()
		}
		rep := wire.Report{RequestID: id, Method: method, URL: target.String(), Headers: map[string]string{}, StartedAt: time.Now().UTC()}
		var body io.Reader
		if method == http.MethodPost || method == http.MethodPut {
			body = strings.NewReader(`{"order":42}`)
		}
		req, _ := http.NewRequestWithContext(r.Context(), method, target.String(), body)
		req.Header.Set("X-Request-Id", rep.RequestID)
		if k := q.Get("key"); k != "" {
			req.Header.Set("Idempotency-Key", k)
		}
		resp, err := viaProxy.Do(req)
		rep.ElapsedMillis = time.Since(rep.StartedAt).Milliseconds()
		if err != nil {
			rep.Error = err.Error()
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			rep.Status = resp.StatusCode
			for _, h := range []string{"X-Retry-Outcome", "X-Retry-Attempts", "X-Retry-Not-Before", "Retry-After"} {
				if v := resp.Header.Get(h); v != "" {
					rep.Headers[h] = v
				}
			}
		}
		arr := &url.URL{Scheme: "http", Host: target.Host, Path: "/arrivals", RawQuery: "id=" + rep.RequestID}
		if areq, rerr := http.NewRequestWithContext(context.Background(), http.MethodGet, arr.String(), nil); rerr != nil {
			// an unparsable id leaves no arrivals
		} else if resp, err := direct.Do(areq); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			_ = json.Unmarshal(b, &rep.Arrivals) // a bad answer leaves no arrivals

		}
		log.Info("call", "requestId", rep.RequestID, "method", method, "path", target.Path, "status", rep.Status,
			"outcome", rep.Headers["X-Retry-Outcome"], "elapsedMillis", rep.ElapsedMillis)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// loadHandler serves /load: requests at a fixed rate for a few seconds.
func loadHandler(log *slog.Logger, viaProxy *http.Client) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		target, err := url.Parse(q.Get("url"))
		rate, rerr := strconv.Atoi(q.Get("rate"))
		secs, serr := strconv.Atoi(q.Get("seconds"))
		if err != nil || target.Scheme != "http" || target.Host == "" || rerr != nil || serr != nil ||
			rate < 1 || rate > 1000 || secs < 1 || secs > 120 {
			http.Error(w, "want url (absolute http://), rate (1-1000) and seconds (1-120)", http.StatusBadRequest)
			return
		}
		rep := load(r.Context(), viaProxy, target.String(), rate, time.Duration(secs)*time.Second)
		log.Info("load", "path", target.Path, "rate", rate, "seconds", secs, "sent", rep.Sent, "dropped", rep.Dropped, "outcomes", rep.Outcomes)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// maxInFlight bounds the requests of one load in flight: a sidecar that holds
// every request must not make the app open connections without end.
const maxInFlight = 500

// load starts rate GETs of target a second through c for d, each with its own
// X-Request-Id, and returns once every answer is in.
func load(ctx context.Context, c *http.Client, target string, rate int, d time.Duration) wire.LoadReport {
	rep := wire.LoadReport{URL: target, Rate: rate, Outcomes: map[string]int{}}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, maxInFlight)
	)
	prefix := newID()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	rep.StartedAt = time.Now().UTC()
	for now := rep.StartedAt; now.Sub(rep.StartedAt) < d; now = <-tick.C {
		select {
		case sem <- struct{}{}:
		default:
			rep.Dropped++
			continue
		}
		rep.Sent++
		rep.StoppedAt = now.UTC()
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			outcome := "error"
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			req.Header.Set("X-Request-Id", id)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				outcome = strconv.Itoa(resp.StatusCode) + " " + resp.Header.Get("X-Retry-Outcome")
			}
			mu.Lock()
			rep.Outcomes[outcome]++
			mu.Unlock()
		}(prefix + "-" + strconv.Itoa(rep.Sent))
	}
	wg.Wait()
	return rep
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
