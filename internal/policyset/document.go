// Package policyset is the contract between the manager and the sidecar: the
// versioned JSON document the manager renders into each namespace's
// retry-policies ConfigMap, and the sidecar's way of turning that document (or
// RetryPolicy YAML files) into the compiled policies that apply to one pod.
package policyset

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

const (
	// ConfigMapName is the per-namespace ConfigMap the manager renders.
	ConfigMapName = "retry-policies"
	// ConfigMapKey holds the Document as JSON.
	ConfigMapKey = "policies.json"
	// DocumentVersion is bumped on any incompatible change of Document. A sidecar
	// refuses a document whose version it does not know (and keeps its old config).
	DocumentVersion = 1
)

// Document is the content of ConfigMap retry-policies, key policies.json:
//
//	{"version":1,"policies":[{"namespace":"shop","name":"payments","generation":3,
//	  "podSelector":{"matchLabels":{"app":"checkout"}},
//	  "upstreams":[{"name":"payments-api","hosts":["payments.shop.svc"],"maxAttempts":4,…,
//	                "podRequestsPerMinute":45}]}]}
//
// Policies are sorted by (namespace, name) and upstreams keep their order in the
// spec, so identical input gives byte-identical output.
type Document struct {
	Version  int      `json:"version"`
	Policies []Policy `json:"policies"`
}

// Policy is one accepted RetryPolicy as rendered for the sidecars.
type Policy struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// PodSelector selects pods by their labels; nil or empty selects every pod.
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	Upstreams   []Upstream            `json:"upstreams"`
}

// Upstream is a RetryPolicy upstream with every default applied, plus the per-pod
// share of the fleet-wide rate limit.
type Upstream struct {
	v1alpha1.Upstream `json:",inline"`
	// PodRequestsPerMinute is rateLimit.requestsPerMinute / max(1, ready selected
	// pods): what one sidecar may start so the fleet stays in one account quota.
	// Zero when rateLimit is not set.
	PodRequestsPerMinute float64 `json:"podRequestsPerMinute,omitempty"`
	// CABundle is the PEM of the ConfigMaps named by tls.caCertificateRefs, resolved
	// by the manager (ResolveCABundles), so the sidecar reads one document; empty
	// when the upstream has no refs (the system roots apply).
	CABundle string `json:"caBundle,omitempty"`
}
