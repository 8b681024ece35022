package config

import "github.com/retrydev/retry-operator/internal/quota"

// Metrics is what loading and following the configuration reports: the
// retry_sidecar_config_* series and the shared quotas' clients
// (docs/observability.md). The sidecar's Prometheus metrics implement it.
type Metrics interface {
	// ConfigLoaded: a configuration was put in force.
	ConfigLoaded(hash string, upstreams []string, revision int64)
	// ConfigRefused: a configuration failed to read, parse or validate.
	ConfigRefused()
	// ConfigStale: a delivery from source was refused as older than the
	// revision in force.
	ConfigStale(source string)
	// APIWatchUp says whether the API watch of retry-policies runs.
	APIWatchUp(up bool)
	// APIWatchFallback: the API watch fell back to the mounted file, for
	// reason (unreachable, forbidden, error).
	APIWatchFallback(reason string)
	// QuotaObserver is the observer every shared quota's client reports to.
	QuotaObserver() quota.Observer
	// WatchQuota and UnwatchQuota add and remove a client whose state is
	// collected at each scrape.
	WatchQuota(c *quota.Client)
	UnwatchQuota(c *quota.Client)
}
