package controller

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota/storeadmin"
)

func TestComputeQuotaStatus(t *testing.T) {
	accepted := func(p v1alpha1.RetryPolicy, status metav1.ConditionStatus, gen int64) v1alpha1.RetryPolicy {
		p.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionAccepted), Status: status, ObservedGeneration: gen}}
		return p
	}
	pod := func(name string, ready bool, labels map[string]string) corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: labels},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	}
	web := quotaPol("web", 2, "partner")
	web.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	web.Spec.Upstreams = append(web.Spec.Upstreams, v1alpha1.Upstream{Name: "other", Hosts: []string{"o.svc"}},
		v1alpha1.Upstream{Name: "second", Hosts: []string{"s.svc"}, QuotaRef: &v1alpha1.QuotaRef{Name: "partner"}})
	all := quotaPol("all", 1, "partner")
	pods := map[string][]corev1.Pod{"ns": {pod("web-1", true, map[string]string{"app": "web"}), pod("web-2", false, map[string]string{"app": "web"}),
		pod("db-1", true, map[string]string{"app": "db"})}}
	cond := func(typ v1alpha1.ConditionType, status metav1.ConditionStatus, reason v1alpha1.ConditionReason) metav1.Condition {
		return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason)}
	}
	for name, tc := range map[string]struct {
		in   QuotaInput
		want v1alpha1.SharedQuotaStatus
	}{
		"accepted policies are consumers and their ready selected pods draw, each pod once": {
			in: QuotaInput{Quota: sharedQuota("partner", &metav1.LabelSelector{}), Pods: pods,
				Policies: []v1alpha1.RetryPolicy{accepted(web, metav1.ConditionTrue, 2), accepted(all, metav1.ConditionTrue, 1)}},
			want: v1alpha1.SharedQuotaStatus{
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, "True", v1alpha1.ReasonValid), cond(v1alpha1.ConditionStoreReachable, "True", v1alpha1.ReasonReachable)},
				Consumers: []v1alpha1.QuotaConsumer{{Namespace: "ns", Policy: "all", Upstream: "u"},
					{Namespace: "ns", Policy: "web", Upstream: "second"}, {Namespace: "ns", Policy: "web", Upstream: "u"}},
				ConsumerCount: 3, DrawingPods: 2,
			},
		},
		"a policy not accepted, or accepted for an older generation, does not consume": {
			in: QuotaInput{Quota: sharedQuota("partner", &metav1.LabelSelector{}), Pods: pods,
				Policies: []v1alpha1.RetryPolicy{accepted(web, metav1.ConditionTrue, 1), accepted(all, metav1.ConditionFalse, 1)}},
			want: v1alpha1.SharedQuotaStatus{
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, "True", v1alpha1.ReasonValid), cond(v1alpha1.ConditionStoreReachable, "True", v1alpha1.ReasonReachable)},
			},
		},
		"a store that refuses the admin is StoreReachable False with its reason": {
			in: QuotaInput{Quota: sharedQuota("partner", nil), StoreErr: &storeadmin.Problem{Reason: v1alpha1.ReasonAuthFailed, Message: "WRONGPASS"}},
			want: v1alpha1.SharedQuotaStatus{
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, "True", v1alpha1.ReasonValid), cond(v1alpha1.ConditionStoreReachable, "False", v1alpha1.ReasonAuthFailed)},
			},
		},
		"an error that is no Problem is Unreachable": {
			in: QuotaInput{Quota: sharedQuota("partner", nil), StoreErr: errors.New("reading Secret: forbidden")},
			want: v1alpha1.SharedQuotaStatus{
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, "True", v1alpha1.ReasonValid), cond(v1alpha1.ConditionStoreReachable, "False", v1alpha1.ReasonUnreachable)},
			},
		},
		"an invalid spec is not Ready and its store is not checked": {
			in: QuotaInput{Quota: func() *v1alpha1.SharedQuota {
				q := sharedQuota("partner", nil)
				q.Spec.RequestsPerSecond = ptr.To[int32](5)
				return q
			}(), StoreErr: errors.New("never looked at")},
			want: v1alpha1.SharedQuotaStatus{
				Conditions: []metav1.Condition{cond(v1alpha1.ConditionReady, "False", v1alpha1.ReasonInvalid), cond(v1alpha1.ConditionStoreReachable, "Unknown", v1alpha1.ReasonInvalid)},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := ComputeQuotaStatus(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.Condition{}, "Message")); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
