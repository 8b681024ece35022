package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// hosts are the three upstreams every sidecar's policy names: partner (the
// quota under test, 1.2 R of demand), spare (a quota far above its demand:
// the latency probe) and direct (no quota or rate limit: the probe's
// baseline).
type hosts struct{ partner, spare, direct string }

// The spare quota is far above its demand in rate and in burst: a send time
// stays good for (burst − 1) / rate, and a pod leases every 100 ms, so 0.33
// s of the rate keeps one on hand between the probes
// (docs/quota.md#choosing-burst; 100,000/s with the largest burst, 10,000,
// made the probes, 100 ms apart, miss them by a round trip).
const spareRate, spareBurst = 30000, 10000

// quotasOf are the scenario's SharedQuotas, named after it (fresh keys in
// the store): partner-<scenario> (rate, burst) and spare-<scenario>.
func quotasOf(scenario string, rate float64, burst int, store string) []v1alpha1.SharedQuota {
	q := func(name string, rate, burst int32) v1alpha1.SharedQuota {
		lastShare := v1alpha1.StoreLossLastShare
		return v1alpha1.SharedQuota{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SharedQuota"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.SharedQuotaSpec{RequestsPerSecond: &rate, Burst: &burst, OnStoreLoss: &lastShare,
				Consumers: &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{}},
				Store:     v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: store}}},
		}
	}
	return []v1alpha1.SharedQuota{q("partner-"+scenario, int32(rate), int32(burst)), q("spare-"+scenario, spareRate, spareBurst)}
}

// policyFile writes the scenario's policy file, a --policy-file: with
// quotas, partner and spare draw on them; without, each has today's per-pod
// split of the same rate as a rateLimit (the rendering's R ÷ pods, burst ÷
// pods rounded up).
func policyFile(dir, scenario string, h hosts, quotas []v1alpha1.SharedQuota, pods int, rate float64, burst int) (string, error) {
	partner, spare := "quotaRef: {name: partner-"+scenario+"}", "quotaRef: {name: spare-"+scenario+"}"
	if len(quotas) == 0 {
		partner = fmt.Sprintf("rateLimit: {requestsPerMinute: %d, burst: %d}", int(rate*60)/pods, (burst+pods-1)/pods)
		spare = fmt.Sprintf("rateLimit: {requestsPerMinute: %d, burst: %d}", spareRate*60, spareBurst)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: bench}
spec:
  upstreams:
  - {name: partner, hosts: [%q], deadline: %s, %s}
  - {name: spare, hosts: [%q], deadline: %s, %s}
  - {name: direct, hosts: [%q], deadline: %s}
`, h.partner, maxWait, partner, h.spare, maxWait, spare, h.direct, maxWait)
	for _, q := range quotas {
		y, err := yaml.Marshal(q)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	p := filepath.Join(dir, scenario+".yaml")
	return p, os.WriteFile(p, []byte(b.String()), 0o600)
}

// writeQuotas writes the SharedQuotas as the replicas read them (JSON).
func writeQuotas(dir, scenario string, quotas []v1alpha1.SharedQuota) (string, error) {
	b, err := json.Marshal(quotas)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, scenario+"-quotas.json")
	return p, os.WriteFile(p, b, 0o600)
}

// leaseDocument is the policy file rendered as the manager renders the
// namespace's policies.json (version 4): the same policies, each quota
// naming the lease endpoint (the balancer's address, the replicas' CA),
// never the store. The token file is set per sidecar (configDir).
func leaseDocument(policy, lbAddr, caPEM string) (policyset.Document, error) {
	data, err := os.ReadFile(policy)
	if err != nil {
		return policyset.Document{}, err
	}
	doc, err := policyset.FromPolicyFiles(data)
	if err != nil {
		return policyset.Document{}, err
	}
	doc.Revision = 1
	for i := range doc.Quotas {
		doc.Quotas[i].Store = nil
		doc.Quotas[i].Lease = &policyset.QuotaLease{URL: "https://" + leaseHost + ":9445", Address: lbAddr, CABundle: caPEM}
	}
	return doc, nil
}

// configDir writes sidecar i's configuration directory, as the kubelet
// mounts it: policies.json (doc, its quotas' token file set) and beside it
// the pod's token (podToken(i)). It returns the directory.
func configDir(dir, name string, doc policyset.Document, i int) (string, error) {
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	token := filepath.Join(d, "token")
	if err := os.WriteFile(token, []byte(podToken(i)+"\n"), 0o600); err != nil {
		return "", err
	}
	quotas := make([]policyset.Quota, len(doc.Quotas))
	for j, q := range doc.Quotas {
		l := *q.Lease
		l.TokenFile = token
		q.Lease = &l
		quotas[j] = q
	}
	doc.Quotas = quotas
	b, err := policyset.Marshal(doc)
	if err != nil {
		return "", err
	}
	return d, os.WriteFile(filepath.Join(d, v1alpha1.PoliciesConfigMapKey), b, 0o600)
}
