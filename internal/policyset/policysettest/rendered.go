package policysettest

import (
	"testing"

	"github.com/retrydev/retry-operator/internal/policyset"
)

// Rendered is policies.json as the manager writes it for the RetryPolicy
// documents in policyYAML, at revision rev: what the sidecar's tests put into
// a mounted file or the retry-policies ConfigMap.
func Rendered(t testing.TB, policyYAML string, rev int64) string {
	t.Helper()
	d, err := policyset.FromPolicyYAML([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	d.Revision = rev
	b, err := policyset.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// PolicyYAML is a RetryPolicy named p with one upstream, up, for host: the
// smallest valid policy file, with extra (indented spec fields, e.g.
// "  podSelector: {...}\n") added to its spec.
func PolicyYAML(host string, extra string) string {
	return "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n" + extra +
		"  upstreams:\n  - name: up\n    hosts: [\"" + host + "\"]\n"
}
