package sidecar

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ConfigStatus is the body of GET /config: which policies.json this sidecar
// runs. The manager counts a pod as programmed for a policy generation once
// Revision reaches the revision that first held it (docs/fleet.md).
//
//	{"revision":1796083201,"hash":"sha256:3f2a…","source":"api"}
type ConfigStatus struct {
	// Revision of the policies.json in force; 0 with policy files only.
	Revision int64 `json:"revision"`
	// Hash is the content hash of the policies in force (policyset.Hash).
	Hash string `json:"hash"`
	// Source: "api", "file" or "policy-file".
	Source string `json:"source"`
}

// ConfigHandler serves GET /config: 200 with a ConfigStatus, or 503 before a
// configuration is loaded.
func ConfigHandler(r *Reloader) http.Handler {
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
		_ = json.NewEncoder(w).Encode(ConfigStatus{Revision: c.Revision, Hash: c.Hash, Source: c.Source})
	})
}

// StatsHandler is the mux of --stats-listen, the pod-IP port that Prometheus
// and the manager reach: /metrics and /config, nothing that changes state.
func StatsHandler(r *Reloader, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/config", ConfigHandler(r))
	return mux
}
