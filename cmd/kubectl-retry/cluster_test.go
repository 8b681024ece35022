package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// TestCluster runs explain and check, as a user would (the command line, a
// kubeconfig file), against a real kube-apiserver with the manager's
// reconciler and both webhooks running in-process and the webhook
// configurations of config/webhook installed.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest")
	}
	cfg, kubeconfig := startClusterWithManager(t)
	seedCluster(t, cfg)
	for _, c := range clusterCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, kubeconfig) })
	}
}

// clusterCases run against the objects seedCluster creates.
var clusterCases = []struct {
	name string
	run  func(t *testing.T, kubeconfig string)
}{
	{"explain an injected pod and the host it calls", explainInjectedPod},
	{"a host no policy names passes through", explainUnnamedHost},
	{"explain a pod that opted out", explainOptedOutPod},
	{"explain a pod that opted in too late is a finding", explainLateOptInPod},
	{"check finds the late pod, the conflict and the unreachable store, and passes the rest", checkFindings},
	{"the human output of explain and check fits 100 columns", humanOutputWidth},
}

// startClusterWithManager starts a kube-apiserver with the webhook
// configurations of config/webhook, and the manager (reconciler and both
// webhooks) in-process; it returns the cluster's config and a kubeconfig file.
func startClusterWithManager(t *testing.T) (*rest.Config, string) {
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg := testenv.Start(t, env)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, os.WriteFile(kubeconfig, env.KubeConfig, 0o600))

	wio := &env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, manager.Options(ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	}))
	must(t, err)
	_, err = manager.Setup(mgr, manager.SetupOptions{Webhooks: true, Inject: podinject.Config{Image: "retry.dev/retry-sidecar:test",
		NoProxy: podinject.DefaultNoProxy, Resources: podinject.DefaultResources(),
		ExcludedNamespaces: v1alpha1.ExcludedNamespaces(defaultOperatorNamespace)}})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	started := mgr.GetWebhookServer().StartedChecker()
	polltest.UntilTrue(t, 30*time.Second, func() bool { return started(nil) == nil })
	return cfg, kubeconfig
}

// seedCluster creates the namespaces, policies, pods and quota the cases read,
// and waits until the manager has judged the conflict and the store.
func seedCluster(t *testing.T, cfg *rest.Config) {
	c, err := client.New(cfg, client.Options{Scheme: clusterScheme()})
	must(t, err)
	bg := context.Background()
	// shop opts in; "late" opts in only after its pod exists.
	must(t, c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop",
		Labels: map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"}}}))
	late := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}}
	must(t, c.Create(bg, late))
	// payments is older (same second: name order) and wins payments.shop.svc.
	must(t, c.Create(bg, policy("payments", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}},
		"payments-api", "payments.shop.svc")))
	must(t, c.Create(bg, policy("payments-b", nil, "payments", "payments.shop.svc", "*.partner.example")))
	must(t, c.Create(bg, pod("shop", "checkout", map[string]string{"app": "checkout"})))
	must(t, c.Create(bg, pod("shop", "legacy", map[string]string{v1alpha1.LabelPodInject: "false"})))
	must(t, c.Create(bg, pod("late", "early", nil)))
	// Nothing listens on port 1 of loopback: the manager finds the store unreachable.
	must(t, c.Create(bg, &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: "partner"},
		Spec: v1alpha1.SharedQuotaSpec{RequestsPerSecond: ptr.To[int32](10),
			Store: v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: "127.0.0.1:1"}}}}))
	late.Labels = map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"}
	must(t, c.Update(bg, late))
	polltest.UntilTrue(t, 30*time.Second, func() bool {
		var b v1alpha1.RetryPolicy
		if c.Get(bg, client.ObjectKey{Namespace: "shop", Name: "payments-b"}, &b) != nil {
			return false
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, string(v1alpha1.ConditionAccepted))
		return cond != nil && cond.Reason == string(v1alpha1.ReasonConflict)
	})
	polltest.UntilTrue(t, 30*time.Second, func() bool {
		var q v1alpha1.SharedQuota
		return c.Get(bg, client.ObjectKey{Name: "partner"}, &q) == nil &&
			meta.FindStatusCondition(q.Status.Conditions, string(v1alpha1.ConditionStoreReachable)) != nil
	})
}

// explainInjectedPod: explain an injected pod and the host it calls.
func explainInjectedPod(t *testing.T, kubeconfig string) {
	var ex Explanation
	code := runJSON(t, &ex, "explain", "pod/checkout", "-n", "shop", "--host", "payments.shop.svc", "--kubeconfig", kubeconfig)
	if code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	want := Explanation{Pod: "shop/checkout", Injected: true, Reason: "NamespaceOptIn",
		Detail: "injected: namespace shop has retry.dev/injection=enabled",
		Policies: []PolicyInfo{
			{Name: "payments", Accepted: "True", Reason: "Valid", Message: "1 upstream(s) accepted", Rendered: true, Upstreams: []string{"payments-api"}},
			{Name: "payments-b", Accepted: "False", Reason: "Conflict", Rendered: false, Upstreams: []string{"payments"},
				Message: `host "payments.shop.svc" is already claimed by RetryPolicy "payments" (older) for pods both policies select; the older policy wins`},
		},
		Host: &HostMatch{Host: "payments.shop.svc", Policy: "payments", Upstream: "payments-api", Pattern: "payments.shop.svc",
			Detail: `RetryPolicy payments, upstream payments-api, by host pattern "payments.shop.svc"`},
		Findings: []string{}}
	assertJSONEqual(t, want, ex)
}

// explainUnnamedHost: a host no policy names passes through.
func explainUnnamedHost(t *testing.T, kubeconfig string) {
	var ex Explanation
	runJSON(t, &ex, "explain", "pod/checkout", "-n", "shop", "--host", "http://api.partner.example/v1", "--kubeconfig", kubeconfig)
	want := &HostMatch{Host: "http://api.partner.example/v1",
		Detail: "no policy or route of this pod names the host: its requests pass through the sidecar unchanged, never retried"}
	assertJSONEqual(t, want, ex.Host)
}

// explainOptedOutPod: explain a pod that opted out.
func explainOptedOutPod(t *testing.T, kubeconfig string) {
	var ex Explanation
	code := runJSON(t, &ex, "explain", "pod/legacy", "-n", "shop", "--kubeconfig", kubeconfig)
	if code != exitOK || ex.Injected || ex.Reason != "PodOptOut" || ex.Detail != "not injected: the pod has retry.dev/inject=false" {
		t.Errorf("exit %d, %+v", code, ex)
	}
}

// explainLateOptInPod: explain a pod that opted in too late is a finding.
func explainLateOptInPod(t *testing.T, kubeconfig string) {
	var ex Explanation
	code := runJSON(t, &ex, "explain", "pod/early", "-n", "late", "--kubeconfig", kubeconfig)
	if code != exitFindings || ex.Injected || ex.Reason != "NamespaceOptIn" || len(ex.Findings) != 1 {
		t.Errorf("exit %d, %+v", code, ex)
	}
}

// checkFindings: check finds the late pod, the conflict and the unreachable store, and passes the rest.
func checkFindings(t *testing.T, kubeconfig string) {
	var r CheckReport
	code := runJSON(t, &r, "check", "--kubeconfig", kubeconfig)
	if code != exitFindings || r.Findings != 3 {
		t.Errorf("exit %d, %d findings, want 1 and 3: %+v", code, r.Findings, r)
	}
	got := map[string]bool{}
	for _, ch := range r.Checks {
		got[ch.Name] = ch.OK
		t.Logf("%-40s %-5t %s", ch.Name, ch.OK, ch.Detail)
	}
	want := map[string]bool{"crd": true,
		"webhook inject.retry.dev": true, "caBundle inject.retry.dev": true, "endpoint inject.retry.dev": true,
		"webhook validate.retrypolicy.retry.dev": true, "caBundle validate.retrypolicy.retry.dev": true,
		"endpoint validate.retrypolicy.retry.dev": true, "opted-in pods": false, "policies": false, "quotas": false}
	assertJSONEqual(t, want, got)
	if want := []string{"late", "shop"}; strings.Join(r.OptedInNamespaces, ",") != strings.Join(want, ",") {
		t.Errorf("opted-in namespaces %v, want %v", r.OptedInNamespaces, want)
	}
	for _, ch := range r.Checks {
		if ch.Name == "opted-in pods" && !strings.Contains(ch.Detail, "late/early") {
			t.Errorf("opted-in pods: %s; want it to name late/early", ch.Detail)
		}
		if want := "1 of 1 without a reachable store (kubectl describe sq): partner (Unreachable)"; ch.Name == "quotas" && ch.Detail != want {
			t.Errorf("quotas: %q, want %q", ch.Detail, want)
		}
	}
}

// humanOutputWidth: the human output of explain and check fits 100 columns.
func humanOutputWidth(t *testing.T, kubeconfig string) {
	var out bytes.Buffer
	run([]string{"explain", "pod/checkout", "-n", "shop", "--host", "payments.shop.svc", "--kubeconfig", kubeconfig}, &out, &bytes.Buffer{})
	run([]string{"explain", "pod/early", "-n", "late", "--kubeconfig", kubeconfig}, &out, &bytes.Buffer{})
	var chk bytes.Buffer
	run([]string{"check", "--kubeconfig", kubeconfig}, &chk, &bytes.Buffer{})
	t.Logf("explain:\n%s\ncheck:\n%s", out.String(), chk.String())
	for _, line := range strings.Split(out.String()+chk.String(), "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("%d columns: %q", len([]rune(line)), line)
		}
	}
}

func policy(name string, sel *metav1.LabelSelector, upstream string, hosts ...string) *v1alpha1.RetryPolicy {
	return &v1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: v1alpha1.RetryPolicySpec{PodSelector: sel,
			Upstreams: []v1alpha1.Upstream{{Name: upstream, Hosts: hosts}}},
	}
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
}

// runJSON runs the command with -o json and decodes its output into v.
func runJSON(t *testing.T, v any, args ...string) int {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(args, "-o", "json"), &stdout, &stderr)
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		t.Fatalf("exit %d, output is not JSON: %v\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	return code
}

func assertJSONEqual(t *testing.T, want, got any) {
	t.Helper()
	w, _ := json.MarshalIndent(want, "", "  ")
	g, _ := json.MarshalIndent(got, "", "  ")
	if !bytes.Equal(w, g) {
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
