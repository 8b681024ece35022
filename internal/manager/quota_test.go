package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota/storeadmin"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
)

// testSharedQuota: the webhook rejects an invalid quota; a quotaRef is
// InvalidRef until the SharedQuota exists,
// QuotaNotAllowed in a namespace its selector does not select until the
// namespace is relabelled; the quota reports Ready, StoreReachable (against a
// real redis-server, stopped and restarted), and its consumers.
func (h *harness) testSharedQuota(t *testing.T) {
	ctx := context.Background()
	store := redistest.Start(t, redistest.WithPassword("admin-pw"))
	must(t, h.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "quota-redis"},
		Data: map[string][]byte{storeadmin.SecretPasswordKey: []byte("admin-pw")}}))
	a := h.namespace(t, "quota-a", map[string]string{"team": "payments"})
	b := h.namespace(t, "quota-b", map[string]string{"team": "search"})
	partner := v1alpha1.Upstream{Name: "partner", Hosts: []string{"api.partner.example"}, QuotaRef: &v1alpha1.QuotaRef{Name: "partner-payments"}}

	h.createPolicy(t, a, "p", nil, partner)
	h.waitAcceptedMessage(t, a, "p", metav1.ConditionFalse, v1alpha1.ReasonInvalidRef,
		`spec.upstreams[0].quotaRef.name: Not found: "partner-payments": SharedQuota partner-payments does not exist`)

	q := &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: "partner-payments"}, Spec: v1alpha1.SharedQuotaSpec{
		RequestsPerMinute: ptr.To[int32](90), Burst: ptr.To[int32](5),
		Consumers: &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
		Store:     v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: store.Addr, CredentialsSecretRef: &v1alpha1.SecretRef{Name: "quota-redis"}}},
	}}
	// The webhook applies the rules CEL cannot express, naming the field.
	bad := q.DeepCopy()
	bad.Spec.Store.Redis.Address = "redis.svc"
	if err := h.c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(),
		`spec.store.redis.address: Invalid value: "redis.svc": must be host:port, such as redis.retry-operator-system.svc:6379, 10.0.0.7:6379 or [fd00::7]:6379`) {
		t.Fatalf("creating a quota whose address has no port: %v; want the webhook's field error", err)
	}
	must(t, h.c.Create(ctx, q))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), q) })
	h.waitAcceptedMessage(t, a, "p", metav1.ConditionTrue, v1alpha1.ReasonValid, "1 upstream(s) accepted")
	doc, err := policyset.Unmarshal([]byte(h.configMap(t, a).Data[v1alpha1.PoliciesConfigMapKey]))
	must(t, err)
	// The sidecars are sent to the lease endpoint: its name, address and CA,
	// and the pod's token. The store's address and Secret stay with the manager.
	wantQuota := policyset.Quota{Name: "partner-payments", RequestsPerSecond: 1.5, Burst: 5, OnStoreLoss: v1alpha1.StoreLossLastShare,
		Lease: &policyset.QuotaLease{URL: h.lease.URL, Address: h.lease.Address, CABundle: string(h.leaseCA), TokenFile: v1alpha1.QuotaTokenPath}}
	if diff := cmp.Diff([]policyset.Quota{wantQuota}, doc.Quotas); diff != "" {
		t.Errorf("the rendering's quotas (-want +got):\n%s", diff)
	}
	if data := h.configMap(t, a).Data[v1alpha1.PoliciesConfigMapKey]; strings.Contains(data, store.Addr) || strings.Contains(data, "quota-redis") {
		t.Errorf("policies.json names the store or its Secret:\n%s", data)
	}

	h.createPolicy(t, b, "p", nil, partner)
	h.waitAcceptedMessage(t, b, "p", metav1.ConditionFalse, v1alpha1.ReasonQuotaNotAllowed,
		"spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner-payments does not admit namespace quota-b: its spec.consumers.namespaceSelector does not select the namespace's labels")
	var nsB corev1.Namespace
	must(t, h.c.Get(ctx, types.NamespacedName{Name: b}, &nsB))
	nsB.Labels["team"] = "payments"
	must(t, h.c.Update(ctx, &nsB))
	h.waitAcceptedMessage(t, b, "p", metav1.ConditionTrue, v1alpha1.ReasonValid, "1 upstream(s) accepted")

	h.waitQuota(t, "partner-payments", func(st v1alpha1.SharedQuotaStatus) error {
		want := []v1alpha1.QuotaConsumer{{Namespace: a, Policy: "p", Upstream: "partner"}, {Namespace: b, Policy: "p", Upstream: "partner"}}
		if diff := cmp.Diff(want, st.Consumers); diff != "" || st.ConsumerCount != 2 || st.DrawingPods != 0 {
			return fmt.Errorf("consumers %v (count %d), drawingPods %d; want %v, 2, 0", st.Consumers, st.ConsumerCount, st.DrawingPods, want)
		}
		return quotaConditions(st, "True/Valid", "True/Reachable", store.Addr+" answered PING with the admin credentials")
	})

	must(t, h.c.Get(ctx, types.NamespacedName{Name: b}, &nsB))
	nsB.Labels["team"] = "search"
	must(t, h.c.Update(ctx, &nsB))
	h.waitAcceptedMessage(t, b, "p", metav1.ConditionFalse, v1alpha1.ReasonQuotaNotAllowed,
		"spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner-payments does not admit namespace quota-b: its spec.consumers.namespaceSelector does not select the namespace's labels; generation 1, the last accepted, stays in force")
	store.Stop()
	h.waitQuota(t, "partner-payments", func(st v1alpha1.SharedQuotaStatus) error {
		return quotaConditions(st, "True/Valid", "False/Unreachable", "")
	})
	store.Restart()
	h.waitQuota(t, "partner-payments", func(st v1alpha1.SharedQuotaStatus) error {
		return quotaConditions(st, "True/Valid", "True/Reachable", "")
	})
	h.waitEvent(t, "", "partner-payments", string(v1alpha1.ReasonUnreachable))
}

// quotaConditions checks Ready and StoreReachable ("True/Valid" form) and,
// when storeMsg is not empty, StoreReachable's message.
func quotaConditions(st v1alpha1.SharedQuotaStatus, ready, store, storeMsg string) error {
	r := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionReady))
	s := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionStoreReachable))
	if r == nil || s == nil {
		return fmt.Errorf("conditions %+v lack Ready or StoreReachable", st.Conditions)
	}
	if got := string(r.Status) + "/" + r.Reason; got != ready {
		return fmt.Errorf("Ready = %s, want %s", got, ready)
	}
	if got := string(s.Status) + "/" + s.Reason; got != store {
		return fmt.Errorf("StoreReachable = %s (%s), want %s", got, s.Message, store)
	}
	if storeMsg != "" && s.Message != storeMsg {
		return fmt.Errorf("StoreReachable message %q, want %q", s.Message, storeMsg)
	}
	return nil
}

func (h *harness) waitQuota(t *testing.T, name string, check func(v1alpha1.SharedQuotaStatus) error) {
	t.Helper()
	polltest.Until(t, 15*time.Second, func() error {
		var q v1alpha1.SharedQuota
		if err := h.c.Get(context.Background(), types.NamespacedName{Name: name}, &q); err != nil {
			return err
		}
		if q.Status.ObservedGeneration != q.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", q.Status.ObservedGeneration, q.Generation)
		}
		return check(q.Status)
	})
}

func (h *harness) waitAcceptedMessage(t *testing.T, ns, name string, status metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		p := h.policy(t, ns, name)
		c := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if c == nil || c.Status != status || c.Reason != string(reason) || c.Message != msg || c.ObservedGeneration != p.Generation {
			return fmt.Errorf("Accepted = %+v, want %s/%s %q", c, status, reason, msg)
		}
		return nil
	})
}
