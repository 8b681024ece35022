//go:build bench

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestConvergence measures what one policy edit costs the manager until
// status.programmedPods reaches every pod: 20 ready injected pods whose
// sidecars (one fake /config server; envtest runs no containers) take up the
// ConfigMap's new revision 50-240 ms after it is written, as the API watch
// does. Reported per edit: time to N/N, GET /config calls, the manager's API
// requests, and the CPU time of this process (manager, fake sidecars and the
// test's own client; the API server is another process). Run with
// bench/controller/run.sh -run TestConvergence.
func TestConvergence(t *testing.T) {
	const n, edits = 20, 5
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	cfg := testenv.Start(t, nil)
	scheme := runtime.NewScheme()
	must(t, clientgoscheme.AddToScheme(scheme))
	must(t, v1alpha1.AddToScheme(scheme))

	sidecars := newLaggingSidecars(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apiCalls := startCountingManager(ctx, t, cfg, scheme, sidecars.URL)

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	must(t, err)
	const ns = "converge"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", i),
			Labels: map[string]string{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected, "app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		must(t, c.Create(ctx, p))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		must(t, c.Status().Update(ctx, p))
	}
	rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "api", Hosts: []string{"api.converge.svc"}}}}}
	must(t, c.Create(ctx, rp))

	go sidecars.followConfigMap(ctx, c, ns)
	waitProgrammed(ctx, t, c, rp, 1, n)
	time.Sleep(time.Second) // settle: no requeue left from the creation

	for e := range edits {
		p0, a0, cpu0 := sidecars.probes.Load(), apiCalls.Load(), cpuTime()
		must(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "api"}, rp))
		rp.Spec.Upstreams[0].MaxAttempts = ptr.To(int32(2 + e%2))
		must(t, c.Update(ctx, rp))
		took := waitProgrammed(ctx, t, c, rp, rp.Generation, n)
		time.Sleep(2 * time.Second) // and whatever the manager still does after convergence
		t.Logf("edit %d: %d/%d pods programmed after %s; GET /config %d, manager API requests %d, CPU %s (this process, incl. 2 s after)",
			e+1, n, n, took.Round(time.Millisecond), sidecars.probes.Load()-p0, apiCalls.Load()-a0, (cpuTime() - cpu0).Round(time.Millisecond))
	}
	p0, a0 := sidecars.probes.Load(), apiCalls.Load()
	time.Sleep(5 * time.Second)
	t.Logf("converged, 5 s idle: GET /config %d, manager API requests %d", sidecars.probes.Load()-p0, apiCalls.Load()-a0)
}

// laggingSidecars are the fake sidecars: one /config server for all pods,
// where pod i reports the revision the ConfigMap had 50ms + i*10ms ago.
type laggingSidecars struct {
	*httptest.Server
	probes  atomic.Int64 // GET /config calls
	mu      sync.Mutex
	history []revisionChange
}

// revisionChange is the ConfigMap taking revision rev at a time.
type revisionChange struct {
	at  time.Time
	rev int64
}

func newLaggingSidecars(t *testing.T) *laggingSidecars {
	f := &laggingSidecars{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.probes.Add(1)
		var i int
		fmt.Sscanf(r.URL.Query().Get("pod"), "pod-%d", &i)
		seen := time.Now().Add(-time.Duration(50+10*i) * time.Millisecond)
		var rev int64
		f.mu.Lock()
		for _, c := range f.history {
			if !c.at.After(seen) {
				rev = c.rev
			}
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(policyset.ConfigStatus{Revision: rev, Source: "api"})
	}))
	t.Cleanup(f.Close)
	return f
}

// followConfigMap records the revisions of ns's ConfigMap as they change,
// every 5 ms, until ctx ends.
func (f *laggingSidecars) followConfigMap(ctx context.Context, c client.Client, ns string) {
	var last int64
	for ctx.Err() == nil {
		var cm corev1.ConfigMap
		if c.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &cm) == nil {
			if doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey])); err == nil && doc.Revision != last {
				last = doc.Revision
				f.mu.Lock()
				f.history = append(f.history, revisionChange{at: time.Now(), rev: doc.Revision})
				f.mu.Unlock()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startCountingManager starts the RetryPolicy reconciler in a manager, with
// no client rate limit, asking the sidecars at sidecarsURL; it returns the
// count of the manager's API requests.
func startCountingManager(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, sidecarsURL string) *atomic.Int64 {
	var apiCalls atomic.Int64
	mcfg := rest.CopyConfig(cfg)
	mcfg.QPS, mcfg.Burst = -1, -1
	mcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			apiCalls.Add(1)
			return rt.RoundTrip(r)
		})
	}
	mgr, err := ctrl.NewManager(mcfg, ctrl.Options{Scheme: scheme, Cache: controller.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	must(t, err)
	rec := &controller.RetryPolicyReconciler{Client: mgr.GetClient(), MaxConcurrentReconciles: 4,
		SidecarConfigURL: func(p *corev1.Pod) string { return sidecarsURL + "/config?pod=" + p.Name }}
	must(t, rec.SetupWithManager(mgr))
	go func() { _ = mgr.Start(ctx) }()
	return &apiCalls
}

// waitProgrammed waits up to a minute until generation gen of rp is
// accepted and programmed in all n pods, and returns how long that took.
func waitProgrammed(ctx context.Context, t *testing.T, c client.Client, rp *v1alpha1.RetryPolicy, gen int64, n int32) time.Duration {
	start := time.Now()
	for time.Since(start) < time.Minute {
		var p v1alpha1.RetryPolicy
		must(t, c.Get(ctx, client.ObjectKeyFromObject(rp), &p))
		if p.Status.LastAccepted != nil && p.Status.LastAccepted.Generation == gen && p.Status.ProgrammedPods == n && p.Status.SelectedPods == n {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("generation %d: programmedPods did not reach %d within a minute", gen, n)
	return 0
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cpuTime is the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
