// Command flaky-upstream is a scriptable HTTP upstream for the end-to-end suite
// and the demo. Each path misbehaves in one documented way, per logical request
// (keyed by X-Request-Id), and every arrival is recorded so a test can measure,
// at the upstream, when each attempt really arrived.
//
//	GET  /retry-after/{s}   first arrival: 429 with "Retry-After: s"; later ones: 200
//	GET  /flaky             first arrival: 503; later ones: 200
//	GET  /sequence/{steps}  arrival n answers step n of a comma-separated list, the last
//	                        step repeating; a step is a status or status:retry-after,
//	                        e.g. /sequence/429:2,503,200
//	GET  /always-503        503 every time (an outage)
//	ANY  /echo              200, echoes method and Idempotency-Key
//	ANY  /slow/{ms}         200 after ms milliseconds; the arrival is recorded at once,
//	                        so a test sees the request in flight
//	POST /write             503 every time (a write that must not be replayed without a key)
//	ANY  /ok/{label}        200 every time; the label tells load generators apart
//	GET  /arrivals?id=X     the recorded arrivals of request id X, as JSON
//	GET  /arrivals?path=P   the recorded arrivals on path P, of every request id, in arrival order
//	GET  /healthz           200
//
// With --tls-cert-dir holding tls.crt and tls.key (a mounted kubernetes.io/tls
// Secret), the same paths are also served over TLS on --tls-listen, sharing the
// recorded arrivals: the upstream of the TLS origination case (docs/tls.md).
//
// With --grpc-listen, every gRPC method is served there too, scripted by the
// call's metadata (grpc.go) and recorded under the method's name as the path:
// the upstream of the gRPC case (docs/grpc.md).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

type recorder struct {
	mu  sync.Mutex
	log map[string][]wire.Arrival // request id → arrivals
}

func (r *recorder) add(id string, a wire.Arrival) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log[id] = append(r.log[id], a)
	return len(r.log[id])
}

// onPath returns every arrival on path, sorted by arrival time.
func (r *recorder) onPath(path string) []wire.Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []wire.Arrival
	for _, as := range r.log {
		for _, a := range as {
			if a.Path == path {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b wire.Arrival) int { return a.At.Compare(b.At) })
	return out
}

func (r *recorder) get(id string) []wire.Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Arrival(nil), r.log[id]...)
}

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	tlsListen := flag.String("tls-listen", ":8443", "address to serve TLS on, when --tls-cert-dir has a certificate")
	tlsDir := flag.String("tls-cert-dir", "", "directory with tls.crt and tls.key; empty or absent: no TLS listener")
	grpcListen := flag.String("grpc-listen", "", "address to serve gRPC on (cleartext HTTP/2); empty: none")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	rec := &recorder{log: map[string][]wire.Arrival{}}
	if *grpcListen != "" {
		go func() {
			if err := serveGRPC(*grpcListen, rec, log); err != nil {
				log.Error("serve gRPC", "err", err)
				os.Exit(1)
			}
		}()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /arrivals", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if p := r.URL.Query().Get("path"); p != "" {
			_ = json.NewEncoder(w).Encode(rec.onPath(p))
			return
		}
		_ = json.NewEncoder(w).Encode(rec.get(r.URL.Query().Get("id")))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Request-Id")
		a := wire.Arrival{Path: r.URL.Path, Method: r.Method, At: time.Now().UTC(), Attempt: r.Header.Get("X-Retry-Attempt"),
			IdempotencyKey: r.Header.Get("Idempotency-Key"), BodyBytes: int(n)}
		if r.TLS != nil {
			a.TLS, a.SNI = true, r.TLS.ServerName
		}
		a.Status = respond(w, r, rec, id, a)
		log.Info("arrival", "path", a.Path, "method", a.Method, "requestId", id, "attempt", a.Attempt, "status", a.Status)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if *tlsDir != "" {
		crt, key := filepath.Join(*tlsDir, "tls.crt"), filepath.Join(*tlsDir, "tls.key")
		if _, err := os.Stat(crt); err == nil {
			tsrv := &http.Server{Addr: *tlsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				log.Info("flaky-upstream listening (TLS)", "addr", *tlsListen)
				if err := tsrv.ListenAndServeTLS(crt, key); err != nil {
					log.Error("serve TLS", "err", err)
					os.Exit(1)
				}
			}()
		}
	}
	log.Info("flaky-upstream listening", "addr", *listen)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// respond scripts the answer and records the arrival; it returns the status sent.
func respond(w http.ResponseWriter, r *http.Request, rec *recorder, id string, a wire.Arrival) int {
	path := r.URL.Path
	status := http.StatusOK
	seen := 0 // earlier arrivals of this request id on this path
	for _, p := range rec.get(id) {
		if p.Path == path {
			seen++
		}
	}
	first := seen == 0
	var hold time.Duration // how long the answer waits after the arrival is recorded
	switch {
	case strings.HasPrefix(path, "/retry-after/") && r.Method == http.MethodGet:
		secs := strings.TrimPrefix(path, "/retry-after/")
		if _, err := strconv.Atoi(secs); err != nil {
			status = http.StatusBadRequest
		} else if first {
			w.Header().Set("Retry-After", secs)
			status = http.StatusTooManyRequests
		}
	case strings.HasPrefix(path, "/sequence/") && r.Method == http.MethodGet:
		code, retryAfter, ok := step(strings.TrimPrefix(path, "/sequence/"), seen)
		if !ok {
			status = http.StatusBadRequest
			break
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		status = code
	case path == "/flaky" && r.Method == http.MethodGet:
		if first {
			status = http.StatusServiceUnavailable
		}
	case path == "/always-503", path == "/write":
		status = http.StatusServiceUnavailable
	case path == "/echo", strings.HasPrefix(path, "/ok/"):
	case strings.HasPrefix(path, "/slow/"):
		ms, err := strconv.Atoi(strings.TrimPrefix(path, "/slow/"))
		if err != nil || ms < 0 || ms > 60000 {
			status = http.StatusBadRequest
			break
		}
		hold = time.Duration(ms) * time.Millisecond
	default:
		status = http.StatusNotFound
	}
	a.Status, a.RetryAfter = status, w.Header().Get("Retry-After")
	n := rec.add(id, a)
	select {
	case <-time.After(hold):
	case <-r.Context().Done(): // the caller is gone: nobody reads the answer
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s %s arrival %d: %d\n", r.Method, path, n, status)
	return status
}

// step returns the status and Retry-After value of the step an arrival gets after
// `seen` earlier ones: steps "429:2,503,200" give 429 with "Retry-After: 2", then
// 503, then 200 for every later arrival.
func step(steps string, seen int) (status int, retryAfter string, ok bool) {
	list := strings.Split(steps, ",")
	s := list[min(seen, len(list)-1)]
	code, ra, _ := strings.Cut(s, ":")
	status, err := strconv.Atoi(code)
	if err != nil || status < 200 || status > 599 {
		return 0, "", false
	}
	if ra != "" {
		if _, err := strconv.Atoi(ra); err != nil {
			return 0, "", false
		}
	}
	return status, ra, true
}
