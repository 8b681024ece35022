// Command demo-app is the application of the demo and the end-to-end suite. It
// makes ordinary HTTP calls — through HTTP_PROXY, that is through the injected
// retry-sidecar — and reports what it saw, so a test (or a person) can compare the
// caller's view with the upstream's recorded arrivals.
//
//	GET /call?url=http://flaky-upstream.demo.svc/retry-after/2[&method=POST][&key=K][&id=I]
//
// answers JSON: the request id it sent (id, or a random one), status, the X-Retry-* headers, the elapsed
// time, and the upstream's arrivals for that request id (fetched without the proxy).
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
	"strings"
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
	mux.HandleFunc("GET /call", func(w http.ResponseWriter, r *http.Request) {
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
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("demo-app listening", "addr", *listen)
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
