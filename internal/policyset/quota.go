package policyset

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
)

// Quota is a SharedQuota as the sidecars use it: one entry of Document.Quotas
// for every quota an upstream of the document names in quotaRef. It carries no
// secret. The manager renders where its lease endpoint is (docs/quota.md#trust):
//
//	{"name":"partner-payments","requestsPerSecond":1.5,"burst":5,"concurrency":3,"onStoreLoss":"LastShare",
//	 "lease":{"url":"https://retry-operator-webhook-service.retry-operator-system.svc:9445",
//	          "address":"10.96.0.12:9445","caBundle":"-----BEGIN CERTIFICATE-----…",
//	          "tokenFile":"/var/run/secrets/retry.dev/quota/token"}}
//
// and policy files (--policy-file, no cluster) the store the sidecar reaches
// itself: "store":{"redis":{"address":"127.0.0.1:6379"}}.
//
// The contract with the sidecar:
//   - every attempt of an upstream whose quotaRef.name is Name takes one token;
//     the whole fleet starts at most RequestsPerSecond × t + Burst attempts in
//     any window of length t, and has at most Concurrency (when > 0) in flight;
//   - with Lease, the sidecar leases from the manager's endpoint, presenting
//     the token in Lease.TokenFile; the endpoint takes the rate, burst,
//     concurrency and onStoreLoss from the SharedQuota, not from these fields,
//     which the sidecar uses for its own arithmetic (how much to ask for, what
//     to admit while the endpoint is lost);
//   - with Store, the state lives in the Redis at Store.Redis.Address under the
//     keys v1alpha1.QuotaKeys(Name)+"*" and nowhere else, and the password, when
//     the store needs one, comes from the sidecar's --quota-credentials-file
//     (or, in a document of version 2 or 3 from an older manager,
//     Store.Redis.CredentialsFile);
//   - an upstream whose quotaRef names no entry of Document.Quotas must not be
//     served unlimited: the document is refused (Check).
type Quota struct {
	// Name is the SharedQuota's name.
	Name string `json:"name"`
	// RequestsPerSecond is spec.requestsPerSecond, or spec.requestsPerMinute / 60.
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	// Burst is spec.burst, defaulted.
	Burst int32 `json:"burst"`
	// Concurrency is spec.concurrency; 0 when absent (no bound).
	Concurrency int32 `json:"concurrency,omitempty"`
	// OnStoreLoss is spec.onStoreLoss, defaulted.
	OnStoreLoss v1alpha1.StoreLossPolicy `json:"onStoreLoss"`
	// Lease is the manager's lease endpoint: what the manager renders.
	Lease *QuotaLease `json:"lease,omitempty"`
	// Store is where the quota's state lives, reached by the sidecar itself:
	// policy files only (and documents of an older manager).
	Store *QuotaStore `json:"store,omitempty"`
}

// Spec is what a quota client (internal/quota) needs of q: the sidecar's
// clients and kubectl retry rehearse's virtual fleet take the same one.
func (q Quota) Spec() quota.Spec {
	return quota.Spec{Name: q.Name, RequestsPerSecond: q.RequestsPerSecond, Burst: int(q.Burst),
		Concurrency: int(q.Concurrency), OnStoreLoss: quota.StoreLoss(q.OnStoreLoss)}
}

// QuotaLease is the manager's lease endpoint as the sidecars in the cluster
// reach it (docs/quota.md#trust).
type QuotaLease struct {
	// URL is https://<host>:<port>: the host is the name the manager's serving
	// certificate carries (the webhook Service's), which the sidecar checks.
	URL string `json:"url"`
	// Address, when set, is the host:port the sidecar dials instead of
	// resolving URL's host: the Service's cluster IP, so that leasing needs
	// no cluster DNS.
	Address string `json:"address,omitempty"`
	// CABundle is the PEM of the CA the serving certificate chains to; empty:
	// the system roots.
	CABundle string `json:"caBundle,omitempty"`
	// TokenFile is the path of the pod's projected service-account token
	// (audience v1alpha1.QuotaTokenAudience) inside the sidecar container.
	TokenFile string `json:"tokenFile"`
}

// QuotaStore is a quota's store as the sidecar reaches it.
type QuotaStore struct {
	Redis RedisStore `json:"redis"`
}

// RedisStore is a Redis server, and in a document of an older manager the
// file holding the credentials the sidecar authenticates with.
type RedisStore struct {
	// Address is host:port.
	Address string `json:"address"`
	// CredentialsFile is the path of a credentials file inside the sidecar
	// container; empty when the store needs none or the sidecar is given
	// --quota-credentials-file. Only documents of versions 2 and 3 written by
	// an older manager carry it; policy files never do.
	CredentialsFile string `json:"credentialsFile,omitempty"`
}

// QuotaSpec is the quota client's view of a valid SharedQuota, defaulted: the
// lease endpoint's spec of record (never the client's). q is not modified.
func QuotaSpec(q *v1alpha1.SharedQuota) quota.Spec {
	return RenderQuota(q, nil).Spec()
}

// RenderQuota renders a valid SharedQuota for the sidecars: with lease, what
// the manager renders (the sidecars lease from its endpoint); without, what
// policy files give (the sidecar reaches the store itself). q is not modified.
func RenderQuota(q *v1alpha1.SharedQuota, lease *QuotaLease) Quota {
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	out := Quota{
		Name:        d.Name,
		Burst:       *d.Spec.Burst,
		OnStoreLoss: *d.Spec.OnStoreLoss,
	}
	if lease != nil {
		l := *lease
		out.Lease = &l
	} else {
		out.Store = &QuotaStore{Redis: RedisStore{Address: d.Spec.Store.Redis.Address}}
	}
	switch {
	case d.Spec.RequestsPerSecond != nil:
		out.RequestsPerSecond = float64(*d.Spec.RequestsPerSecond)
	case d.Spec.RequestsPerMinute != nil:
		out.RequestsPerSecond = float64(*d.Spec.RequestsPerMinute) / 60
	}
	if c := d.Spec.Concurrency; c != nil {
		out.Concurrency = *c
	}
	return out
}

// Admits reports whether the quota admits RetryPolicies of a namespace with
// these labels: an absent consumers or namespaceSelector admits none, an empty
// selector every namespace.
func Admits(q *v1alpha1.SharedQuota, namespaceLabels map[string]string) (bool, error) {
	if q.Spec.Consumers == nil || q.Spec.Consumers.NamespaceSelector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(q.Spec.Consumers.NamespaceSelector)
	if err != nil {
		return false, fmt.Errorf("SharedQuota %s: spec.consumers.namespaceSelector: %w", q.Name, err)
	}
	return sel.Matches(labels.Set(namespaceLabels)), nil
}

// StandaloneNamespaceLabels are the labels a namespace is judged by where there
// is no cluster (policy files): the one the API server sets on every namespace.
func StandaloneNamespaceLabels(namespace string) map[string]string {
	return map[string]string{corev1.LabelMetadataName: namespace}
}

// QuotaRefs returns the names of the quotas the upstreams of policies draw on,
// sorted, each once.
func QuotaRefs(policies []Policy) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range policies {
		for _, u := range p.Upstreams {
			if u.QuotaRef != nil && !seen[u.QuotaRef.Name] {
				seen[u.QuotaRef.Name] = true
				out = append(out, u.QuotaRef.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Quota returns the entry of doc.Quotas named name.
func (doc Document) Quota(name string) (Quota, bool) {
	for _, q := range doc.Quotas {
		if q.Name == name {
			return q, true
		}
	}
	return Quota{}, false
}

// CheckQuotaRefs refuses a document with an upstream whose quotaRef names no
// entry of doc.Quotas: such an upstream would otherwise be served without its
// quota.
func CheckQuotaRefs(doc Document) error {
	for _, p := range doc.Policies {
		for i, u := range p.Upstreams {
			if u.QuotaRef == nil {
				continue
			}
			if _, ok := doc.Quota(u.QuotaRef.Name); !ok {
				return fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].quotaRef.name: Not found: %q: the document has no quota of that name",
					p.Namespace, p.Name, i, u.QuotaRef.Name)
			}
		}
	}
	return nil
}
