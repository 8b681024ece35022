//go:build bench

// Package controller is the manager's scale benchmark (docs/performance.md): 1,000
// RetryPolicies in 100 namespaces until all are Accepted, then a steady state
// that must write nothing, then 200 pod creates through the injection webhook.
// It runs the real manager (controller + webhooks) in-process against a real
// kube-apiserver and etcd. Run with bench/controller/run.sh (make bench-controller).
package controller

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

const (
	namespaces   = 100
	perNamespace = 10
	pods         = 200
	excludedNS   = "retry-operator-system"
)

func TestScale(t *testing.T) {
	steady := benchSteadyDuration(t)
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard))) // the numbers are the output
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startScaleManager(ctx, t)

	// Phase 1: 1,000 policies in 100 namespaces, created by 8 writers.
	created, allAccepted := createPoliciesUntilAccepted(ctx, t, r.c)

	// Phase 2: steady state. Count every write to RetryPolicies and their
	// ConfigMaps with watches; a full resync (every namespace reconciled once
	// more, as after a restart or leader change) happens at its start.
	policyWrites, cmWrites := r.countWritesAfterAResync(ctx, t, steady)

	// Phase 3: pod admission. 200 pods into the opted-in namespace (injected),
	// then the same into the excluded namespace, which the API server does not
	// send to the webhook: the end-to-end difference is what injection costs.
	r.timer.reset()
	injected := createPods(ctx, t, r.c, nsName(0))
	handler := r.timer.get()
	baseline := createPods(ctx, t, r.c, excludedNS)

	report := fmt.Sprintf(`retry-operator manager scale benchmark (docs/performance.md)
  policies: %d in %d namespaces, created by 8 writers in %s
  time until all Accepted (from first create):      %s   (target <= 20s)
  steady state %s after a full resync of %d namespaces:
    RetryPolicy writes: %d, ConfigMap writes: %d   (target 0)
  pod admission, %d creates each:
    webhook handler (decide + inject + patch):   p50 %s  p99 %s   (target p99 <= 20ms)
    pod create, injected namespace (end to end): p50 %s  p99 %s
    pod create, excluded namespace (no webhook): p50 %s  p99 %s
`, namespaces*perNamespace, namespaces, created.Round(time.Millisecond), allAccepted.Round(time.Millisecond),
		steady, namespaces, policyWrites, cmWrites,
		pods, pct(handler, 50), pct(handler, 99), pct(injected, 50), pct(injected, 99), pct(baseline, 50), pct(baseline, 99))
	fmt.Print(report)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		must(t, os.WriteFile(out, []byte(report), 0o644))
	}
}

// benchSteadyDuration is how long the steady state is watched: 60 s, or
// $BENCH_STEADY.
func benchSteadyDuration(t *testing.T) time.Duration {
	steady := 60 * time.Second
	if v := os.Getenv("BENCH_STEADY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BENCH_STEADY: %v", err)
		}
		steady = d
	}
	return steady
}

// scaleRig is the manager under test (controller and webhooks, with the
// injection handler timed) and a client of the API server.
type scaleRig struct {
	cfg    *rest.Config
	scheme *runtime.Scheme
	c      client.Client
	rec    *controller.RetryPolicyReconciler
	timer  *handlerTimer
}

// startScaleManager starts the manager against a new API server until ctx
// ends, and waits until its webhook server has started.
func startScaleManager(ctx context.Context, t *testing.T) *scaleRig {
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")}}}
	cfg := testenv.Start(t, env)
	cfg.QPS, cfg.Burst = -1, -1 // as ctrl.GetConfig does: rely on API priority and fairness
	wio := &env.WebhookInstallOptions

	opts := manager.Options(ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	scheme := opts.Scheme
	mgr, err := ctrl.NewManager(cfg, opts)
	must(t, err)
	timer := &handlerTimer{}
	rec, err := manager.Setup(mgr, manager.SetupOptions{
		MaxConcurrentReconciles: 4,
		Webhooks:                true,
		Inject: podinject.Config{Image: podinject.DefaultImage, NoProxy: podinject.DefaultNoProxy,
			Resources: podinject.DefaultResources(), ExcludedNamespaces: []string{"kube-system", excludedNS}},
		WrapInject: timer.wrap,
	})
	must(t, err)
	go func() { _ = mgr.Start(ctx) }()
	started := mgr.GetWebhookServer().StartedChecker()
	for started(nil) != nil {
		time.Sleep(20 * time.Millisecond)
	}
	c, err := client.New(rest.CopyConfig(cfg), client.Options{Scheme: scheme})
	must(t, err)
	return &scaleRig{cfg: cfg, scheme: scheme, c: c, rec: rec, timer: timer}
}

// createPoliciesUntilAccepted creates the namespaces and, with 8 writers,
// perNamespace policies in each, then waits until all are Accepted. It
// returns the time the creates took and the time until all were Accepted.
func createPoliciesUntilAccepted(ctx context.Context, t *testing.T, c client.Client) (created, allAccepted time.Duration) {
	for i := range namespaces {
		labels := map[string]string{}
		if i == 0 {
			labels[v1alpha1.LabelNamespaceInjection] = "enabled"
		}
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: labels}}))
	}
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: excludedNS}}))

	start := time.Now()
	work := make(chan [2]int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range work {
				must(t, c.Create(ctx, benchPolicy(w[0], w[1])))
			}
		}()
	}
	for i := range namespaces {
		for j := range perNamespace {
			work <- [2]int{i, j}
		}
	}
	close(work)
	wg.Wait()
	created = time.Since(start)
	for {
		if n := accepted(ctx, t, c); n == namespaces*perNamespace {
			break
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("not all Accepted after 5 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return created, time.Since(start)
}

// countWritesAfterAResync reconciles every namespace once more and counts,
// for steady, the writes to RetryPolicies and to their ConfigMaps.
func (r *scaleRig) countWritesAfterAResync(ctx context.Context, t *testing.T, steady time.Duration) (policyWrites, cmWrites int64) {
	c, cfg, scheme, rec := r.c, r.cfg, r.scheme, r.rec
	var policyList v1alpha1.RetryPolicyList
	must(t, c.List(ctx, &policyList))
	var cmList corev1.ConfigMapList
	must(t, c.List(ctx, &cmList))
	wc, err := client.NewWithWatch(rest.CopyConfig(cfg), client.Options{Scheme: scheme})
	must(t, err)
	pw, err := wc.Watch(ctx, &v1alpha1.RetryPolicyList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: policyList.ResourceVersion}})
	must(t, err)
	cw, err := wc.Watch(ctx, &corev1.ConfigMapList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: cmList.ResourceVersion}})
	must(t, err)
	var policyCount, cmCount atomic.Int64
	count := func(w watch.Interface, n *atomic.Int64, onlyRendered bool) {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Bookmark || ev.Type == watch.Error {
				continue
			}
			if o, ok := ev.Object.(client.Object); ok && onlyRendered && o.GetName() != v1alpha1.PoliciesConfigMapName {
				continue
			}
			n.Add(1)
		}
	}
	go count(pw, &policyCount, false)
	go count(cw, &cmCount, true)
	for i := range namespaces {
		if _, err := rec.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: nsName(i), Name: v1alpha1.PoliciesConfigMapName}}); err != nil {
			t.Fatalf("resync reconcile: %v", err)
		}
	}
	time.Sleep(steady)
	pw.Stop()
	cw.Stop()
	return policyCount.Load(), cmCount.Load()
}

func nsName(i int) string { return fmt.Sprintf("bench-%03d", i) }

// benchPolicy j of namespace i: its own host, selector on its own app label,
// every optional feature the renderer compiles.
func benchPolicy(i, j int) *v1alpha1.RetryPolicy {
	return &v1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsName(i), Name: fmt.Sprintf("policy-%02d", j)},
		Spec: v1alpha1.RetryPolicySpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%02d", j)}},
			Upstreams: []v1alpha1.Upstream{{
				Name:      "api",
				Hosts:     []string{fmt.Sprintf("api-%02d.%s.svc", j, nsName(i)), fmt.Sprintf("partner-%02d.example:8443", j)},
				RateLimit: &v1alpha1.RateLimit{RequestsPerMinute: 600},
			}},
		},
	}
}

func accepted(ctx context.Context, t *testing.T, c client.Client) int {
	var l v1alpha1.RetryPolicyList
	must(t, c.List(ctx, &l))
	n := 0
	for _, p := range l.Items {
		if cond := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted)); cond != nil &&
			cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == p.Generation {
			n++
		}
	}
	return n
}

func createPods(ctx context.Context, t *testing.T, c client.Client, ns string) []time.Duration {
	out := make([]time.Duration, 0, pods)
	for i := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%03d", i), Labels: map[string]string{"app": "app-01"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		s := time.Now()
		must(t, c.Create(ctx, p))
		out = append(out, time.Since(s))
		if ns != excludedNS && p.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
			t.Fatalf("pod %s/%s was not injected", ns, p.Name)
		}
	}
	return out
}

type handlerTimer struct {
	mu sync.Mutex
	d  []time.Duration
}

func (h *handlerTimer) wrap(next admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		s := time.Now()
		resp := next.Handle(ctx, req)
		h.mu.Lock()
		h.d = append(h.d, time.Since(s))
		h.mu.Unlock()
		return resp
	})
}

func (h *handlerTimer) reset() { h.mu.Lock(); h.d = nil; h.mu.Unlock() }

func (h *handlerTimer) get() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.d)
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(len(s)-1, max(0, i-1))].Round(10 * time.Microsecond)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
