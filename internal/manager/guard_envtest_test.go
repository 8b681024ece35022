package manager

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// testGuard: a pod held by a scheduling gate keeps its injected containers
// unstarted; changing their image is refused (the webhook named in the error,
// the field path in the message), everything else about the pod may change,
// and those other updates are not even sent to the webhook (matchConditions).
func (h *harness) testGuard(t *testing.T) {
	ns := h.namespace(t, "guard", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled", v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent})
	h.namespaceCached(t, ns)
	ctx := context.Background()
	pod := testPod(ns, "gated", nil)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	must(t, h.c.Create(ctx, pod))
	if inits := pod.Spec.InitContainers; len(inits) != 2 || inits[0].Name != podinject.RedirectContainerName || inits[1].Name != podinject.ContainerName {
		t.Fatalf("init containers = %+v, want retry-redirect then retry-sidecar", inits)
	}
	key := ns + "/gated"

	refused := map[string]struct {
		patch string
		want  string
	}{
		"the redirect container's image": {
			patch: `[{"op":"replace","path":"/spec/initContainers/0/image","value":"tenant.example/tool:1"}]`,
			want:  `spec.initContainers[0].image: Forbidden: retry-redirect was injected by retry-operator and it runs as root with NET_ADMIN and NET_RAW: its image cannot change (it is "retry.dev/retry-sidecar:test")`,
		},
		"the sidecar's image": {
			patch: `[{"op":"replace","path":"/spec/initContainers/1/image","value":"tenant.example/proxy:1"}]`,
			want:  `spec.initContainers[1].image: Forbidden: retry-sidecar was injected by retry-operator and it proxies every outbound call of the pod: its image cannot change (it is "retry.dev/retry-sidecar:test")`,
		},
		"the sidecar's image with the injection label removed in the same update": {
			patch: `[{"op":"replace","path":"/spec/initContainers/1/image","value":"tenant.example/proxy:1"},{"op":"remove","path":"/metadata/labels/retry.dev~1sidecar"}]`,
			want:  `spec.initContainers[1].image: Forbidden: retry-sidecar was injected`,
		},
	}
	for name, tc := range refused {
		t.Run("refused: "+name, func(t *testing.T) {
			err := h.c.Patch(ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta}, client.RawPatch(types.JSONPatchType, []byte(tc.patch)))
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "guard.retry.dev" denied the request`) ||
				!strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant Forbidden by guard.retry.dev containing %q", err, tc.want)
			}
		})
	}
	calls := h.guards.get(key)
	if calls != len(refused) {
		t.Errorf("guard called %d times for %d refused updates", calls, len(refused))
	}

	// In this order: the gate goes last, as a tenant would lift it.
	for _, tc := range []struct{ name, patch string }{
		{"an app container's image", `[{"op":"replace","path":"/spec/containers/0/image","value":"app:2"}]`},
		{"a label", `[{"op":"add","path":"/metadata/labels/team","value":"payments"}]`},
		{"lifting the scheduling gate", `[{"op":"remove","path":"/spec/schedulingGates"}]`},
	} {
		t.Run("allowed: "+tc.name, func(t *testing.T) {
			must(t, h.c.Patch(ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta}, client.RawPatch(types.JSONPatchType, []byte(tc.patch))))
		})
	}
	if n := h.guards.get(key) - calls; n != 0 {
		t.Errorf("guard called %d times for updates that change no injected container, want 0 (matchConditions)", n)
	}
	var got corev1.Pod
	must(t, h.c.Get(ctx, client.ObjectKeyFromObject(pod), &got))
	if got.Spec.InitContainers[0].Image != pod.Spec.InitContainers[0].Image || got.Spec.InitContainers[1].Image != pod.Spec.InitContainers[1].Image ||
		got.Spec.Containers[0].Image != "app:2" || len(got.Spec.SchedulingGates) != 0 {
		t.Errorf("pod after the updates: init images %q, %q, app image %q, gates %v; want the injected images, app:2 and no gate",
			got.Spec.InitContainers[0].Image, got.Spec.InitContainers[1].Image, got.Spec.Containers[0].Image, got.Spec.SchedulingGates)
	}
}
