package config

import (
	"maps"
	"testing"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// A quota's client is filed under the namespace of the policies that name
// it, or "" when policies of several namespaces name it (a --policy-file).
func TestQuotaNamespaces(t *testing.T) {
	policy := func(ns string, quotas ...string) policyset.Policy {
		p := policyset.Policy{Namespace: ns, Name: "p"}
		for _, q := range quotas {
			u := policyset.Upstream{}
			u.QuotaRef = &v1alpha1.QuotaRef{Name: q}
			p.Upstreams = append(p.Upstreams, u)
		}
		return p
	}
	tests := map[string]struct {
		selected []policyset.Policy
		want     map[string]string
	}{
		"one namespace's policies: that namespace": {
			[]policyset.Policy{policy("shop", "a"), policy("shop", "a", "b")}, map[string]string{"a": "shop", "b": "shop"}},
		"policies of two namespaces naming one quota: none": {
			[]policyset.Policy{policy("shop", "a", "b"), policy("pay", "a")}, map[string]string{"a": "", "b": "shop"}},
		"a policy without a quotaRef names none": {
			[]policyset.Policy{policy("shop")}, map[string]string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := quotaNamespaces(tc.selected); !maps.Equal(got, tc.want) {
				t.Errorf("quotaNamespaces = %v, want %v", got, tc.want)
			}
		})
	}
}
