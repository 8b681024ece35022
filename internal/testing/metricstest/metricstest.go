// Package metricstest tells tests which metric names the sidecar and the
// manager really register, so a dashboard or a document cannot name one that
// does not exist.
package metricstest

import (
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	// The manager's packages: importing them registers every controller-runtime
	// series the manager serves (reconciles, work queue, webhooks, leader
	// election, client) and the quota lease endpoint's on crmetrics.Registry,
	// as in the binary.
	_ "github.com/retrydev/retry-operator/internal/controller"
	_ "github.com/retrydev/retry-operator/internal/quota/leaseserver"
	_ "github.com/retrydev/retry-operator/internal/webhook/podinject"
	_ "github.com/retrydev/retry-operator/internal/webhook/v1alpha1"

	"github.com/retrydev/retry-operator/internal/sidecar"
)

// Registries are the sidecar's and the manager's metric registries.
type Registries struct {
	Sidecar, Manager prometheus.Registerer
}

// New returns a fresh sidecar registry and the manager's global one.
func New() Registries {
	return Registries{Sidecar: sidecar.NewMetrics().Registry, Manager: crmetrics.Registry}
}

// RegisteredIn names the binary ("sidecar" or "manager") that has a collector
// describing the metric (a histogram's _bucket, _sum and _count belong to its
// base name), or "". A registry refuses a second collector with a name it
// already has; that refusal is the probe, and nothing is left registered.
func (r Registries) RegisteredIn(name string) string {
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, reg := range []struct {
		who string
		r   prometheus.Registerer
	}{{"sidecar", r.Sidecar}, {"manager", r.Manager}} {
		for _, c := range candidates {
			probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: c, Help: "metric name probe"})
			err := reg.r.Register(probe)
			if err == nil {
				reg.r.Unregister(probe)
				continue
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) || strings.Contains(err.Error(), "previously registered descriptor with the same fully-qualified name") {
				return reg.who
			}
		}
	}
	return ""
}
