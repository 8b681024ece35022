package podinject

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestInjectedChanges(t *testing.T) {
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	injected := testConfig().InjectMode(plain, Interception{Mode: ModeTransparent, Ports: []uint16{80}})
	tests := map[string]struct {
		old  *corev1.Pod
		edit func(p *corev1.Pod)
		want []string
	}{
		"a new image of the redirect container is refused": {
			old:  injected,
			edit: func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "tenant.example/tool:1" },
			want: []string{`spec.initContainers[0].image: Forbidden: retry-redirect was injected by retry-operator and it runs as root with NET_ADMIN and NET_RAW: its image cannot change (it is "retry.dev/retry-sidecar:dev")`},
		},
		"a new image and security context of the sidecar are refused, each naming its field": {
			old: injected,
			edit: func(p *corev1.Pod) {
				p.Spec.InitContainers[1].Image = "tenant.example/proxy:1"
				p.Spec.InitContainers[1].SecurityContext.RunAsUser = ptr.To[int64](0)
			},
			want: []string{
				`spec.initContainers[1].image: Forbidden: retry-sidecar was injected by retry-operator and it proxies every outbound call of the pod: its image cannot change (it is "retry.dev/retry-sidecar:dev")`,
				`spec.initContainers[1].securityContext: Forbidden: retry-sidecar was injected by retry-operator and it proxies every outbound call of the pod: its security context cannot change`,
			},
		},
		"a security context given to the sidecar where it had none is refused": {
			old: func() *corev1.Pod {
				p := plain.DeepCopy()
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ContainerName, Image: "retry.dev/retry-sidecar:dev"})
				return p
			}(),
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			want: []string{`spec.containers[1].securityContext: Forbidden: retry-sidecar was injected by retry-operator and it proxies every outbound call of the pod: its security context cannot change`},
		},
		"a new image of an app container is allowed": {
			old:  injected,
			edit: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2" },
		},
		"lifting a scheduling gate and relabelling are allowed": {
			old: func() *corev1.Pod {
				p := injected.DeepCopy()
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
				return p
			}(),
			edit: func(p *corev1.Pod) { p.Spec.SchedulingGates, p.Labels = nil, map[string]string{"team": "payments"} },
		},
		"a pod without injected containers may change anything": {
			old: plain,
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			updated := tc.old.DeepCopy()
			tc.edit(updated)
			errs := InjectedChanges(tc.old, updated)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
