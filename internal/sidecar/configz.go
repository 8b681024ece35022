package sidecar

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
)

// DefaultStatsListen is the stats address: every interface of the pod, so
// Prometheus and the manager reach it on the pod IP (docs/operations.md).
var DefaultStatsListen = ":" + strconv.Itoa(v1alpha1.StatsPort)

// ConfigHandler serves GET /config: 200 with a policyset.ConfigStatus, or 503 before a
// configuration is loaded.
func ConfigHandler(r *config.Reloader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		c := r.Current()
		if c == nil {
			http.Error(w, "no configuration loaded yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(policyset.ConfigStatus{Revision: c.Revision, Hash: c.Hash, Source: c.Source,
			SHA256: c.SHA256, Upstreams: c.Upstreams})
	})
}

// StatsHandler is the mux of --stats-listen, the pod-IP port that Prometheus
// and the manager reach: GET and HEAD of /metrics and /config, nothing that
// changes state; any other method is 405 with Allow: GET, HEAD.
func StatsHandler(r *config.Reloader, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.Handle("GET /config", ConfigHandler(r))
	return mux
}
