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
// secret, only where the sidecar reads one (docs/quota.md):
//
//	{"name":"partner-payments","requestsPerSecond":1.5,"burst":5,"concurrency":3,"onStoreLoss":"LastShare",
//	 "store":{"redis":{"address":"redis.retry-operator-system.svc:6379",
//	                   "credentialsFile":"/var/run/retry.dev/quota/credentials"}}}
//
// The contract with the sidecar:
//   - every attempt of an upstream whose quotaRef.name is Name takes one token;
//     the whole fleet starts at most RequestsPerSecond × t + Burst attempts in
//     any window of length t, and has at most Concurrency (when > 0) in flight;
//   - the state lives in the Redis at Store.Redis.Address under the keys
//     v1alpha1.QuotaKeys(Name)+"*" and nowhere else (the ACL user of the
//     namespace may touch no other key);
//   - Store.Redis.CredentialsFile, when set, is the path of a file in the
//     format of ParseCredentials; empty means the sidecar's
//     --quota-credentials-file if given, else no AUTH;
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
	// Store is where the quota's state lives.
	Store QuotaStore `json:"store"`
}

// Spec is what a quota client (internal/quota) needs of q: the sidecar's
// clients and kubectl retry rehearse's virtual fleet take the same one.
func (q Quota) Spec() quota.Spec {
	return quota.Spec{Name: q.Name, RequestsPerSecond: q.RequestsPerSecond, Burst: int(q.Burst),
		Concurrency: int(q.Concurrency), OnStoreLoss: quota.StoreLoss(q.OnStoreLoss)}
}

// QuotaStore is a quota's store as the sidecar reaches it.
type QuotaStore struct {
	Redis RedisStore `json:"redis"`
}

// RedisStore is a Redis server and the file holding the credentials the
// sidecar authenticates with.
type RedisStore struct {
	// Address is host:port.
	Address string `json:"address"`
	// CredentialsFile is the path of the credentials file inside the sidecar
	// container (v1alpha1.QuotaCredentialsPath when rendered by the manager);
	// empty when the store needs none or the sidecar is given
	// --quota-credentials-file.
	CredentialsFile string `json:"credentialsFile,omitempty"`
}

// RenderQuota renders a valid SharedQuota for the sidecars; credentialsFile is
// where they read their credentials ("" for none). q is not modified.
func RenderQuota(q *v1alpha1.SharedQuota, credentialsFile string) Quota {
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	out := Quota{
		Name:        d.Name,
		Burst:       *d.Spec.Burst,
		OnStoreLoss: *d.Spec.OnStoreLoss,
		Store:       QuotaStore{Redis: RedisStore{Address: d.Spec.Store.Redis.Address, CredentialsFile: credentialsFile}},
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
