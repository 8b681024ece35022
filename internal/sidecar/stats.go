package sidecar

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultStatsListen is the stats address: every interface of the pod, so
// Prometheus reaches it on the pod IP (docs/operations.md, "Metrics").
const DefaultStatsListen = ":15090"

// Stats serves what may leave the pod, read-only:
//
//	/metrics  Prometheus text format (see Metrics)
//	/config   the configuration in force, as JSON (ConfigInfo)
//
// Health, readiness and pprof stay on the loopback admin address.
type Stats struct {
	Reloader *Reloader
	Metrics  *Metrics
	// Sources are reported by /config.
	Sources Sources
}

// ConfigInfo is the body of GET /config. Before any configuration is loaded,
// Loaded is false and the other fields are empty.
//
//	{"loaded":true,"revision":7,"hash":"sha256:3f1c…","sha256":"3f1c…",
//	 "upstreams":["payments"],"source":{"configDir":"/etc/retry-sidecar/policies"}}
type ConfigInfo struct {
	Loaded bool `json:"loaded"`
	// Revision is policies.json's "revision", verbatim, when it has one.
	Revision json.RawMessage `json:"revision,omitempty"`
	// Hash is the content hash the manager reports (policyset.Hash);
	// SHA256 the full sha256 of the same bytes.
	Hash      string     `json:"hash,omitempty"`
	SHA256    string     `json:"sha256,omitempty"`
	Upstreams []string   `json:"upstreams"`
	Source    SourceInfo `json:"source"`
}

// SourceInfo names where the configuration is read from.
type SourceInfo struct {
	ConfigDir   string   `json:"configDir,omitempty"`
	PolicyFiles []string `json:"policyFiles,omitempty"`
	PodLabels   string   `json:"podLabels,omitempty"`
}

// Info is the ConfigInfo of the configuration in force.
func (s *Stats) Info() ConfigInfo {
	info := ConfigInfo{Upstreams: []string{}, Source: SourceInfo{
		ConfigDir: s.Sources.ConfigDir, PolicyFiles: s.Sources.PolicyFiles, PodLabels: s.Sources.PodLabels}}
	if c := s.Reloader.Current(); c != nil {
		info.Loaded, info.Revision, info.Hash, info.SHA256 = true, c.Revision, c.Hash, c.SHA256
		if c.Upstreams != nil {
			info.Upstreams = c.Upstreams
		}
	}
	return info
}

// Handler returns the stats mux.
func (s *Stats) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Info())
	})
	return mux
}
