package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

func TestUpdatePredicates(t *testing.T) {
	pod := func(ready bool, labels map[string]string) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	}
	ca := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "partner-ca"}, Data: data}
	}
	web := map[string]string{"app": "web"}
	tests := map[string]struct {
		p             predicate.Predicate
		before, after client.Object
		want          bool
	}{
		"a pod turning ready passes": {
			p: podChanged(), before: pod(false, web), after: pod(true, web), want: true,
		},
		"a pod changing labels passes": {
			p: podChanged(), before: pod(true, web), after: pod(true, map[string]string{"app": "db"}), want: true,
		},
		"a pod update that keeps readiness and labels is dropped": {
			p: podChanged(), before: pod(true, web), after: func() *corev1.Pod { p := pod(true, web); p.Annotations = map[string]string{"a": "b"}; return p }(),
			want: false,
		},
		"an object of another kind passes": {
			p: podChanged(), before: ca(map[string]string{"ca.crt": "x"}), after: ca(nil), want: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.Update(event.UpdateEvent{ObjectOld: tc.before, ObjectNew: tc.after}); got != tc.want {
				t.Fatalf("Update = %v, want %v", got, tc.want)
			}
			if !tc.p.Create(event.CreateEvent{Object: tc.after}) || !tc.p.Delete(event.DeleteEvent{Object: tc.after}) {
				t.Error("a create or delete event was dropped")
			}
			if tc.p.Generic(event.GenericEvent{Object: tc.after}) {
				t.Error("a generic event passed")
			}
		})
	}
}
