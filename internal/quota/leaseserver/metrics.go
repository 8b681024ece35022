package leaseserver

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// leaseRequests counts the endpoint's answers by status code, on the
// manager's metrics endpoint (docs/observability.md#the-lease-endpoint). The
// codes are the endpoint's own few (server.go), never a value from the
// request.
var leaseRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "retry_manager_quota_lease_requests_total",
	Help: "Lease calls the manager's quota lease endpoint answered, by HTTP status code.",
}, []string{"code"})

func init() { crmetrics.Registry.MustRegister(leaseRequests) }

func countLease(code int) { leaseRequests.WithLabelValues(strconv.Itoa(code)).Inc() }
