package sidecar

import (
	"io"
	"net/http"
	"net/http/pprof"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/retrydev/retry-operator/internal/sidecar/config"
)

// Admin serves the admin endpoints:
//
//	/healthz   200 while the process serves
//	/readyz    200 once a configuration is loaded (it stays 200 when a later one is
//	           refused), 503 before that and while draining on SIGTERM
//	/metrics   Prometheus text format (see Metrics)
//	/config    the policies.json revision, hash and source in force (configz.go)
//	/debug/pprof/  only with --enable-pprof
type Admin struct {
	Reloader *config.Reloader
	Metrics  *Metrics
	Pprof    bool
	draining atomic.Bool
}

// Handler returns the admin mux.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case a.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case !a.Reloader.Ready():
			http.Error(w, "no configuration loaded yet", http.StatusServiceUnavailable)
		default:
			io.WriteString(w, "ok "+a.Reloader.Current().Hash+"\n")
		}
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/config", ConfigHandler(a.Reloader))
	if a.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
