package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

func sharedQuota(name string, selector *metav1.LabelSelector) *v1alpha1.SharedQuota {
	q := &v1alpha1.SharedQuota{Spec: v1alpha1.SharedQuotaSpec{RequestsPerMinute: ptr.To[int32](90), Burst: ptr.To[int32](5),
		Store: v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: "redis:6379", CredentialsSecretRef: &v1alpha1.SecretRef{Name: "admin"}}}}}
	q.Name = name
	if selector != nil {
		q.Spec.Consumers = &v1alpha1.QuotaConsumers{NamespaceSelector: selector}
	}
	return q
}

func quotaPol(name string, gen int64, quota string) v1alpha1.RetryPolicy {
	p := pol(name, 0, gen, nil, name+".svc")
	p.Spec.Upstreams[0].QuotaRef = &v1alpha1.QuotaRef{Name: quota}
	return p
}

// quotaRefsLease is the lease endpoint every case of TestComputeQuotaRefs
// renders for its quotas.
var quotaRefsLease = policyset.QuotaLease{URL: "https://retry-operator-webhook-service.retry-operator-system.svc:9445", Address: "10.96.0.12:9445",
	CABundle: "-----BEGIN CERTIFICATE-----\n", TokenFile: v1alpha1.QuotaTokenPath}

// quotaRefsCase is one policy with a quotaRef: its Accepted condition, the
// policies rendered and the quotas rendered with them.
type quotaRefsCase struct {
	in           Input
	wantAccepted string
	wantMessage  string
	wantRendered []string
	wantQuotas   []policyset.Quota
}

// quotaRefsCases are the cases of TestComputeQuotaRefs: a quota that admits
// the namespace, one that is missing or refuses it, and a kept rendering.
func quotaRefsCases(t *testing.T) map[string]quotaRefsCase {
	t.Helper()
	lease := quotaRefsLease
	payments := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}
	rendered := policyset.Quota{Name: "partner", RequestsPerSecond: 1.5, Burst: 5, OnStoreLoss: v1alpha1.StoreLossLastShare, Lease: &lease}
	// As an older manager rendered it: the sidecars reached the store with
	// their namespace's Redis user.
	legacy := policyset.Quota{Name: "partner", RequestsPerSecond: 1.5, Burst: 5, OnStoreLoss: v1alpha1.StoreLossLastShare,
		Store: &policyset.QuotaStore{Redis: policyset.RedisStore{Address: "redis:6379", CredentialsFile: "/var/run/retry.dev/quota/credentials"}}}
	keptPolicy := func() policyset.Policy {
		return policyset.Policy{Namespace: "ns", Name: "p", Generation: 1, Upstreams: []policyset.Upstream{
			renderedUpstream(t, quotaPol("p", 1, "partner").Spec.Upstreams[0], 0)}}
	}
	withLastAccepted := func(p v1alpha1.RetryPolicy) v1alpha1.RetryPolicy {
		p.Status.LastAccepted = &v1alpha1.AcceptedRendering{Generation: 1, Revision: 7,
			Upstreams: []v1alpha1.Upstream{*keptPolicy().Upstreams[0].API()}}
		return p
	}
	return map[string]quotaRefsCase{
		"a quota that admits the namespace is rendered with the policy": {
			in: Input{Policies: []v1alpha1.RetryPolicy{quotaPol("p", 1, "partner")},
				Quotas: map[string]*v1alpha1.SharedQuota{"partner": sharedQuota("partner", payments)}, NamespaceLabels: map[string]string{"team": "payments"}},
			wantAccepted: "True/Valid", wantMessage: "1 upstream(s) accepted",
			wantRendered: []string{"p"}, wantQuotas: []policyset.Quota{rendered},
		},
		"a quotaRef naming no SharedQuota is InvalidRef": {
			in:           Input{Policies: []v1alpha1.RetryPolicy{quotaPol("p", 1, "partner")}, NamespaceLabels: map[string]string{"team": "payments"}},
			wantAccepted: "False/InvalidRef",
			wantMessage:  `spec.upstreams[0].quotaRef.name: Not found: "partner"`,
		},
		"a namespace the selector does not select is QuotaNotAllowed": {
			in: Input{Policies: []v1alpha1.RetryPolicy{quotaPol("p", 1, "partner")},
				Quotas: map[string]*v1alpha1.SharedQuota{"partner": sharedQuota("partner", payments)}, NamespaceLabels: map[string]string{"team": "search"}},
			wantAccepted: "False/QuotaNotAllowed",
			wantMessage:  "spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner does not admit namespace ns: its spec.consumers.namespaceSelector does not select the namespace's labels",
		},
		"a quota without consumers admits no namespace": {
			in: Input{Policies: []v1alpha1.RetryPolicy{quotaPol("p", 1, "partner")},
				Quotas: map[string]*v1alpha1.SharedQuota{"partner": sharedQuota("partner", nil)}},
			wantAccepted: "False/QuotaNotAllowed",
			wantMessage:  "spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner does not admit namespace ns: its spec.consumers.namespaceSelector does not select the namespace's labels",
		},
		"an empty selector admits every namespace, and a store without admin credentials is rendered alike": {
			in: Input{Policies: []v1alpha1.RetryPolicy{quotaPol("p", 1, "partner")},
				Quotas: map[string]*v1alpha1.SharedQuota{"partner": func() *v1alpha1.SharedQuota {
					q := sharedQuota("partner", &metav1.LabelSelector{})
					q.Spec.Store.Redis.CredentialsSecretRef = nil
					return q
				}()}},
			wantAccepted: "True/Valid", wantMessage: "1 upstream(s) accepted", wantRendered: []string{"p"},
			wantQuotas: []policyset.Quota{rendered},
		},
		"a namespace that left the consumers keeps its last rendering with the quota as last rendered, leasing from the endpoint (which refuses it)": {
			in: Input{Policies: []v1alpha1.RetryPolicy{withLastAccepted(quotaPol("p", 1, "partner"))},
				Quotas:          map[string]*v1alpha1.SharedQuota{"partner": sharedQuota("partner", payments)},
				NamespaceLabels: map[string]string{"team": "search"},
				Previous:        policyset.Document{Version: 2, Revision: 7, Policies: []policyset.Policy{keptPolicy()}, Quotas: []policyset.Quota{legacy}}},
			wantAccepted: "False/QuotaNotAllowed",
			wantMessage:  "spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner does not admit namespace ns: its spec.consumers.namespaceSelector does not select the namespace's labels; generation 1, the last accepted, stays in force",
			wantRendered: []string{"p"}, wantQuotas: []policyset.Quota{rendered},
		},
		"a kept rendering whose quota was never rendered is dropped, not rendered without it": {
			in:           Input{Policies: []v1alpha1.RetryPolicy{withLastAccepted(quotaPol("p", 1, "partner"))}},
			wantAccepted: "False/InvalidRef",
			wantMessage:  `spec.upstreams[0].quotaRef.name: Not found: "partner": SharedQuota partner does not exist`,
		},
	}
}

func TestComputeQuotaRefs(t *testing.T) {
	for name, tc := range quotaRefsCases(t) {
		t.Run(name, func(t *testing.T) {
			tc.in.Lease = quotaRefsLease
			out, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			acc := out.Status["p"].Accepted
			if got := acc.Status + "/" + metav1.ConditionStatus(acc.Reason); string(got) != tc.wantAccepted {
				t.Errorf("Accepted = %s, want %s", got, tc.wantAccepted)
			}
			if acc.Message != tc.wantMessage && !(len(tc.wantMessage) < len(acc.Message) && acc.Message[:len(tc.wantMessage)] == tc.wantMessage) {
				t.Errorf("Accepted message\n%q\nwant it to start with\n%q", acc.Message, tc.wantMessage)
			}
			var names []string
			for _, p := range out.Document.Policies {
				names = append(names, p.Name)
			}
			if !cmp.Equal(names, tc.wantRendered) {
				t.Errorf("rendered %v, want %v", names, tc.wantRendered)
			}
			if diff := cmp.Diff(tc.wantQuotas, out.Document.Quotas); diff != "" {
				t.Errorf("quotas (-want +got):\n%s", diff)
			}
			if out.Data != nil {
				if _, err := policyset.Unmarshal(out.Data); err != nil {
					t.Errorf("the sidecar refuses the rendering: %v", err)
				}
			}
		})
	}
}
