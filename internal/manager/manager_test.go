package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// harness is a manager (controller + both webhooks) running in-process against
// a real kube-apiserver and etcd, with the webhook configurations of
// config/webhook/manifests.yaml installed.
type harness struct {
	c          client.Client // direct, uncached: what the API server says now
	warnings   *warningLog
	env        *envtest.Environment
	reconciler *controller.RetryPolicyReconciler
	calls      *callCounter
	guards     *callCounter
	wio        *envtest.WebhookInstallOptions
	scheme     *runtime.Scheme
	cfg        *rest.Config
	sidecars   *fakeSidecars
	// lease is the quota lease endpoint the manager serves and renders, and
	// leaseCA the CA its certificate chains to.
	lease   controller.LeaseEndpoint
	leaseCA []byte
}

const operatorNamespace = "retry-operator-system"

func startManager(t *testing.T) *harness {
	t.Helper()
	logs := io.Discard
	if os.Getenv("TEST_LOG") != "" { // TEST_LOG=1 go test ... shows the manager's log
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logs)))
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg := testenv.Start(t, env)
	wio := &env.WebhookInstallOptions

	// The manager runs with the rights the install gives it and no more
	// (config/rbac), leader election included: every scenario below also
	// proves those rights suffice.
	admin, err := client.New(cfg, client.Options{Scheme: Scheme()})
	must(t, err)
	must(t, admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))
	opts := Options(ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: operatorNamespace,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
		// Each test of the package starts a manager; the controllers' names
		// repeat in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	scheme := opts.Scheme
	mgr, err := ctrl.NewManager(testenv.ManagerConfig(t, cfg, operatorNamespace), opts)
	must(t, err)
	sidecars := newFakeSidecars(t)
	calls, guards := &callCounter{n: map[string]int{}}, &callCounter{n: map[string]int{}}
	lease, leaseListener, leaseCA := leaseEndpoint(t, wio)
	rec, err := Setup(mgr, SetupOptions{
		MaxConcurrentReconciles: 4,
		SidecarConfigURL:        sidecars.url,
		OperatorNamespace:       operatorNamespace,
		StoreRecheck:            500 * time.Millisecond,
		CARecheck:               time.Second,
		Webhooks:                true,
		Inject: podinject.Config{Image: "retry.dev/retry-sidecar:test", NoProxy: podinject.DefaultNoProxy,
			Resources: podinject.DefaultResources(), ExcludedNamespaces: []string{"kube-system", operatorNamespace}},
		WrapInject: calls.wrap,
		WrapGuard:  guards.wrap,
		QuotaLease: QuotaLease{Endpoint: lease, Listener: leaseListener,
			CertFile: filepath.Join(wio.LocalServingCertDir, "tls.crt"), KeyFile: filepath.Join(wio.LocalServingCertDir, "tls.key")},
	})
	must(t, err)
	// A second mutating webhook that changes every pod after ours, so the API
	// server reinvokes ours (reinvocationPolicy IfNeeded): the idempotency test.
	mgr.GetWebhookServer().Register("/test-relabel", &webhook.Admission{Handler: admission.HandlerFunc(relabel)})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	started := mgr.GetWebhookServer().StartedChecker()
	polltest.Until(t, 20*time.Second, func() error { return started(nil) })

	warnings := &warningLog{}
	direct := rest.CopyConfig(cfg)
	direct.WarningHandler = warnings
	c, err := client.New(direct, client.Options{Scheme: scheme})
	must(t, err)
	must(t, c.Create(context.Background(), testenv.SidecarClusterRole(t, controller.DefaultSidecarClusterRole)))
	// The reconciler's own instance, called directly to prove a no-op reconcile
	// writes nothing; it reads through the same cache as the running one.
	return &harness{c: c, warnings: warnings, reconciler: rec, calls: calls, guards: guards, wio: wio, scheme: scheme, env: env, cfg: cfg, sidecars: sidecars,
		lease: lease, leaseCA: leaseCA}
}

// leaseEndpoint is the quota lease endpoint of the test manager: on a
// loopback port, with the webhook's certificate (envtest's, for localhost),
// whose CA the rendering carries from a ca.crt file as in a cluster.
func leaseEndpoint(t *testing.T, wio *envtest.WebhookInstallOptions) (controller.LeaseEndpoint, net.Listener, []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	must(t, os.WriteFile(caFile, wio.LocalServingCAData, 0o600))
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return controller.LeaseEndpoint{URL: "https://localhost:" + port, Address: ln.Addr().String(), CAFile: caFile}, ln, wio.LocalServingCAData
}

// TestManager runs every scenario against one API server; the subtests are
// sequential and each uses its own namespace.
func TestManager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	h := startManager(t)
	t.Run("a new policy is rendered into the ConfigMap and reported Accepted and Programmed", h.testCreate)
	t.Run("an update re-renders; a reconcile with nothing changed writes nothing", h.testUpdateAndNoOp)
	t.Run("deleting policies shrinks the ConfigMap, deleting the last removes it", h.testDelete)
	t.Run("the newer of two policies claiming one host for overlapping pods gets Conflict", h.testConflict)
	t.Run("the webhook rejects an invalid policy naming the field path, and warns about risky ones", h.testWebhookRejects)
	t.Run("the rate limit and burst are shared among ready injected pods and recomputed when one is added, goes unready or is deleted", h.testRateSharing)
	t.Run("status.programmedPods counts the sidecars that report the revision, and the manager stops asking once all do", h.testProgrammedPods)
	t.Run("the sidecars' RoleBinding exists exactly while the namespace has injected pods and does not opt out, and names their service accounts", h.testSidecarBinding)
	t.Run("a sidecar's service-account token reads retry-policies of its own namespace and nothing else; other service accounts read nothing", h.testSidecarLeastPrivilege)
	t.Run("a pod of an opted-in namespace gets exactly one sidecar although the webhook runs twice", h.testInjectOnce)
	t.Run("a kube-system pod is never sent to the webhook and stays untouched", h.testKubeSystem)
	t.Run("a pod of a namespace asking for transparent interception gets the redirect init container with only NET_ADMIN and NET_RAW, and no proxy environment", h.testTransparent)
	t.Run("a pod asking for transparent interception of invalid ports is admitted with the proxy environment and a warning event", h.testTransparentBadPorts)
	t.Run("transparent interception in a namespace enforcing restricted Pod Security falls back to the proxy environment with a warning event", h.testTransparentRestricted)
	t.Run("an update of an injected container's image is refused naming the field; other updates of the pod never reach the webhook", h.testGuard)
	t.Run("tls.caCertificateRefs are resolved, read again and reported InvalidRef when missing or over 256 KiB", h.testTLS)
	t.Run("only opted-in pods are sent to the webhook: by namespace label or by pod label, once", h.testWebhookScope)
	t.Run("a quotaRef is InvalidRef until its SharedQuota exists and QuotaNotAllowed outside its consumers; the quota reports its store and consumers", h.testSharedQuota)
	t.Run("the lease endpoint leases for a consumer's pod token (TokenReview) and refuses every other", h.testQuotaLease)
	t.Run("a namespace relabelled out of a quota's consumers is revoked and its pods forgotten within a lease interval", h.testQuotaRevoked)
	t.Run("the manager dials no address a tenant's object names, and deletes the per-namespace users of earlier releases", h.testNoTenantAddress)
	t.Run("kubectl get rp shows Accepted, Programmed, the upstream count and the selected pods, 0 included", h.testPrinterColumns)
	// Last: it deletes the validating webhook configuration.
	t.Run("with the webhook gone an invalid update is caught by the reconciler and the last rendering survives, even the loss of the ConfigMap", h.testInvalidBypassingWebhook)
}

func (h *harness) testCreate(t *testing.T) {
	ns := h.namespace(t, "create", nil)
	p := h.createPolicy(t, ns, "payments", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}},
		upstream("payments-api", "payments.shop.svc", "api.partner.example:8443"))

	got := h.waitAccepted(t, ns, "payments", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	cm := h.configMap(t, ns)
	rev := revisionOf(t, cm)
	want := render(t, got, 0, rev)
	if cm.Data[v1alpha1.PoliciesConfigMapKey] != string(want) {
		t.Fatalf("policies.json:\n%s\nwant:\n%s", cm.Data[v1alpha1.PoliciesConfigMapKey], want)
	}
	if cm.Labels[controller.ManagedByLabel] != controller.ManagedByValue {
		t.Errorf("labels = %v, want %s=%s", cm.Labels, controller.ManagedByLabel, controller.ManagedByValue)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != p.UID || cm.OwnerReferences[0].Kind != "RetryPolicy" {
		t.Errorf("ownerReferences = %+v, want the policy %s", cm.OwnerReferences, p.UID)
	}
	prog := meta.FindStatusCondition(got.Status.Conditions, string(v1alpha1.ConditionProgrammed))
	wantMsg := fmt.Sprintf("0/0 pods run generation 1 (ConfigMap retry-policies revision %d, %s)", rev, policyset.Hash(want))
	if prog == nil || prog.Status != metav1.ConditionTrue || prog.Reason != string(v1alpha1.ReasonRendered) || prog.Message != wantMsg || prog.ObservedGeneration != 1 {
		t.Errorf("Programmed = %+v, want True/Rendered %q at generation 1", prog, wantMsg)
	}
	if got.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration = %d, want 1", got.Status.ObservedGeneration)
	}
	if la := got.Status.LastAccepted; la == nil || la.Generation != 1 || la.Revision != rev || len(la.Upstreams) != 1 ||
		*la.Upstreams[0].MaxAttempts != v1alpha1.DefaultMaxAttempts {
		t.Errorf("status.lastAccepted = %+v, want generation 1 at revision %d with the defaulted upstream", la, rev)
	}
	h.waitEvent(t, ns, "payments", string(v1alpha1.ReasonValid))
	h.waitEvent(t, ns, "payments", string(v1alpha1.ReasonRendered))
}

func (h *harness) testUpdateAndNoOp(t *testing.T) {
	ns := h.namespace(t, "update", nil)
	h.createPolicy(t, ns, "api", nil, upstream("api", "api.update.svc"))
	p := h.waitAccepted(t, ns, "api", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	rev1 := revisionOf(t, h.configMap(t, ns))

	p.Spec.Upstreams[0].MaxAttempts = ptr.To[int32](4)
	must(t, h.c.Update(context.Background(), p))
	polltest.Until(t, 10*time.Second, func() error {
		cm := h.configMap(t, ns)
		doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
		if err != nil {
			return err
		}
		if g, a := doc.Policies[0].Generation, *doc.Policies[0].Upstreams[0].MaxAttempts; g != 2 || a != 4 {
			return fmt.Errorf("rendered generation %d maxAttempts %d, want 2 and 4", g, a)
		}
		return nil
	})
	p = h.waitObserved(t, ns, "api", 2)
	rev2 := revisionOf(t, h.configMap(t, ns))
	if rev2 <= rev1 {
		t.Errorf("revision %d after the edit, want more than %d", rev2, rev1)
	}

	cmRV, pRV := h.configMap(t, ns).ResourceVersion, p.ResourceVersion
	for range 3 {
		if _, err := h.reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	// Settle: anything the running controller would still write happens now.
	time.Sleep(500 * time.Millisecond)
	if rv := h.configMap(t, ns).ResourceVersion; rv != cmRV {
		t.Errorf("ConfigMap written by a no-op reconcile: resourceVersion %s -> %s", cmRV, rv)
	}
	if rv := h.policy(t, ns, "api").ResourceVersion; rv != pRV {
		t.Errorf("status written by a no-op reconcile: resourceVersion %s -> %s", pRV, rv)
	}

	// A restarted manager knows nothing but what the API server holds: a fresh
	// reconciler renders the same revision for the same content, and a higher
	// one for the next edit.
	fresh := &controller.RetryPolicyReconciler{Client: h.c, SidecarConfigURL: h.sidecars.url,
		Now: func() time.Time { return time.Unix(rev2-3600, 0) }} // a clock an hour behind
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}}
	if _, err := fresh.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := revisionOf(t, h.configMap(t, ns)); got != rev2 {
		t.Errorf("revision %d after a restart without a change, want %d", got, rev2)
	}
	p = h.policy(t, ns, "api")
	p.Spec.Upstreams[0].MaxAttempts = ptr.To[int32](5)
	must(t, h.c.Update(context.Background(), p))
	polltest.Until(t, 10*time.Second, func() error {
		if got := revisionOf(t, h.configMap(t, ns)); got <= rev2 {
			return fmt.Errorf("revision %d after the next edit, want more than %d", got, rev2)
		}
		return nil
	})
}

func (h *harness) testDelete(t *testing.T) {
	ns := h.namespace(t, "delete", nil)
	a := h.createPolicy(t, ns, "a", nil, upstream("a", "a.delete.svc"))
	b := h.createPolicy(t, ns, "b", nil, upstream("b", "b.delete.svc"))
	h.waitAccepted(t, ns, "a", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	h.waitAccepted(t, ns, "b", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	polltest.Until(t, 10*time.Second, func() error { return renderedNames(h.configMap(t, ns), "a", "b") })

	must(t, h.c.Delete(context.Background(), a))
	polltest.Until(t, 10*time.Second, func() error {
		cm := h.configMap(t, ns)
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != b.UID {
			return fmt.Errorf("ownerReferences = %+v, want only b", cm.OwnerReferences)
		}
		return renderedNames(cm, "b")
	})

	must(t, h.c.Delete(context.Background(), b))
	polltest.Until(t, 10*time.Second, func() error {
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("ConfigMap still there (err=%w)", err)
		}
		return nil
	})
}

func (h *harness) testConflict(t *testing.T) {
	ns := h.namespace(t, "conflict", nil)
	h.createPolicy(t, ns, "older", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}}, upstream("pay", "payments.conflict.svc"))
	h.waitAccepted(t, ns, "older", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	// creationTimestamp has one-second resolution: make "newer" really newer.
	time.Sleep(1100 * time.Millisecond)
	h.createPolicy(t, ns, "newer", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}, upstream("pay2", "payments.conflict.svc"))
	// Disjoint from both: app differs from older's, tier from newer's.
	h.createPolicy(t, ns, "disjoint", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "billing", "tier": "batch"}}, upstream("pay3", "payments.conflict.svc"))

	newer := h.waitAccepted(t, ns, "newer", metav1.ConditionFalse, string(v1alpha1.ReasonConflict))
	acc := meta.FindStatusCondition(newer.Status.Conditions, string(v1alpha1.ConditionAccepted))
	if want := `host "payments.conflict.svc" is already claimed by RetryPolicy "older" (older) for pods both policies select; the older policy wins`; acc.Message != want {
		t.Errorf("Conflict message = %q, want %q", acc.Message, want)
	}
	if prog := meta.FindStatusCondition(newer.Status.Conditions, string(v1alpha1.ConditionProgrammed)); prog.Status != metav1.ConditionFalse || prog.Reason != string(v1alpha1.ReasonNotRendered) {
		t.Errorf("Programmed of the loser = %+v, want False/NotRendered", prog)
	}
	h.waitAccepted(t, ns, "disjoint", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	polltest.Until(t, 10*time.Second, func() error { return renderedNames(h.configMap(t, ns), "disjoint", "older") })
	h.waitEvent(t, ns, "newer", string(v1alpha1.ReasonConflict))

	must(t, h.c.Delete(context.Background(), h.policy(t, ns, "older")))
	h.waitAccepted(t, ns, "newer", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	polltest.Until(t, 10*time.Second, func() error { return renderedNames(h.configMap(t, ns), "disjoint", "newer") })
}

func (h *harness) testWebhookRejects(t *testing.T) {
	ns := h.namespace(t, "reject", nil)
	bad := policy(ns, "bad", nil, upstream("api", "Payments.Shop.svc"), upstream("api2", "x.reject.svc"))
	bad.Spec.Upstreams[1].IdempotencyKey = &v1alpha1.IdempotencyKey{Header: "Bad Header"}
	err := h.c.Create(context.Background(), bad)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create of an invalid policy: err = %v, want 422 Invalid", err)
	}
	for _, want := range []string{
		`admission webhook "validate.retrypolicy.retry.dev" denied the request`,
		`spec.upstreams[0].hosts[0]: Invalid value: "Payments.Shop.svc": must be lower-case (payments.shop.svc)`,
		`spec.upstreams[1].idempotencyKey.header: Invalid value: "Bad Header": must be an HTTP header name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}

	risky := policy(ns, "risky", nil, upstream("api", "risky.reject.svc"))
	risky.Spec.Upstreams[0].MaxAttempts = ptr.To[int32](8)
	risky.Spec.Upstreams[0].ReplayableMethods = []string{"GET", "PUT"}
	h.warnings.reset()
	must(t, h.c.Create(context.Background(), risky))
	want := []string{
		"spec.upstreams[0].maxAttempts: 8 transmissions per request multiply load 8-fold when the upstream fails; 5 or fewer is usual",
		"spec.upstreams[0].replayableMethods[1]: PUT is replayed without an idempotency key; a retry after a lost response may apply the write twice unless the upstream's PUT is idempotent (set idempotencyKey.header to be sure)",
	}
	if got := h.warnings.get(); !slices.Equal(got, want) {
		t.Errorf("warnings = %q\nwant %q", got, want)
	}
}

func (h *harness) testRateSharing(t *testing.T) {
	ns := h.namespace(t, "rate", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	u := upstream("partner", "api.partner.example")
	u.RateLimit = &v1alpha1.RateLimit{RequestsPerMinute: 90, Burst: ptr.To[int32](5)}
	h.createPolicy(t, ns, "quota", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, u)
	h.waitAccepted(t, ns, "quota", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	h.waitShare(t, ns, 90, 5, 0) // no pod yet: the first one gets it all

	for i := range 3 {
		h.readyPod(t, ns, fmt.Sprintf("web-%d", i), map[string]string{"app": "web"})
	}
	h.readyPod(t, ns, "other", map[string]string{"app": "other"}) // injected, not selected
	h.waitShare(t, ns, 30, 2, 3)

	h.readyPod(t, ns, "web-3", map[string]string{"app": "web"})
	h.waitShare(t, ns, 22.5, 2, 4)

	// web-3 goes unready: the three others share again.
	pod := &corev1.Pod{}
	must(t, h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web-3"}, pod))
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	must(t, h.c.Status().Update(context.Background(), pod))
	h.waitShare(t, ns, 30, 2, 3)

	// web-2 is deleted: two pods left, 45 per minute and a burst of 3 each.
	must(t, h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-2"}},
		client.GracePeriodSeconds(0)))
	h.waitShare(t, ns, 45, 3, 2)
}

func (h *harness) testProgrammedPods(t *testing.T) {
	ns := h.namespace(t, "programmed", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	h.createPolicy(t, ns, "api", nil, upstream("api", "api.programmed.svc"))
	h.readyPod(t, ns, "a", map[string]string{"app": "web"})
	h.readyPod(t, ns, "b", map[string]string{"app": "web"})
	h.waitAccepted(t, ns, "api", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	h.waitProgrammed(t, ns, "api", 0, 2)

	// The sidecars catch up one by one; no event wakes the controller, its
	// bounded requeues find out.
	rev := revisionOf(t, h.configMap(t, ns))
	h.sidecars.set(ns, "a", rev)
	h.waitProgrammed(t, ns, "api", 1, 2)
	h.sidecars.set(ns, "b", rev)
	p := h.waitProgrammed(t, ns, "api", 2, 2)
	prog := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionProgrammed))
	if want := fmt.Sprintf("2/2 pods run generation 1 (ConfigMap retry-policies revision %d, ", rev); !strings.HasPrefix(prog.Message, want) {
		t.Errorf("Programmed message %q, want it to start with %q", prog.Message, want)
	}

	// Converged: nobody asks the sidecars any more.
	before := h.sidecars.calls(ns)
	time.Sleep(3 * time.Second)
	if after := h.sidecars.calls(ns); after != before {
		t.Errorf("%d more GET /config after convergence, want none", after-before)
	}
	if before > 20 {
		t.Errorf("%d GET /config to converge two pods, want a handful", before)
	}

	// An edit: the pods run the old revision until they report the new one.
	p.Spec.Upstreams[0].MaxAttempts = ptr.To[int32](2)
	must(t, h.c.Update(context.Background(), p))
	h.waitObserved(t, ns, "api", 2)
	h.waitProgrammed(t, ns, "api", 0, 2)
	rev2 := revisionOf(t, h.configMap(t, ns))
	h.sidecars.set(ns, "a", rev2)
	h.sidecars.set(ns, "b", rev2)
	h.waitProgrammed(t, ns, "api", 2, 2)
}

func (h *harness) testSidecarBinding(t *testing.T) {
	ns := h.namespace(t, "binding", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	h.noBinding(t, ns) // no injected pod yet
	h.readyPod(t, ns, "a", nil)
	rb := h.waitBinding(t, ns)
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}}
	if !slices.Equal(rb.Subjects, want) || rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != controller.DefaultSidecarClusterRole {
		t.Fatalf("RoleBinding subjects %+v roleRef %+v, want %+v bound to ClusterRole %s", rb.Subjects, rb.RoleRef, want, controller.DefaultSidecarClusterRole)
	}

	// Pods running as other service accounts: the binding names each once,
	// sorted, and forgets one when its last pod goes.
	h.readyPodAs(t, ns, "b", "reports")
	h.readyPodAs(t, ns, "c", "api")
	h.readyPodAs(t, ns, "d", "api")
	h.waitSubjects(t, ns, "api", "default", "reports")
	must(t, h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}, client.GracePeriodSeconds(0)))
	h.waitSubjects(t, ns, "api", "default")
	for _, name := range []string{"c", "d"} {
		must(t, h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)))
	}
	rb = h.waitSubjects(t, ns, "default")
	// Owned by the ClusterRole, so removing the operator removes the binding
	// (the garbage collector; the e2e uninstall case shows it).
	var role rbacv1.ClusterRole
	must(t, h.c.Get(context.Background(), client.ObjectKey{Name: controller.DefaultSidecarClusterRole}, &role))
	wantOwner := metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}
	if len(rb.OwnerReferences) != 1 || rb.OwnerReferences[0] != wantOwner {
		t.Fatalf("RoleBinding owners %+v, want exactly %+v", rb.OwnerReferences, wantOwner)
	}

	// A binding of an older manager, without the owner: given it.
	orphan := rb.DeepCopy()
	orphan.OwnerReferences = nil
	must(t, h.c.Update(context.Background(), orphan))
	polltest.Until(t, 10*time.Second, func() error {
		var got rbacv1.RoleBinding
		if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(rb), &got); err != nil {
			return err
		}
		if len(got.OwnerReferences) != 1 || got.OwnerReferences[0] != wantOwner {
			return fmt.Errorf("RoleBinding owners %+v, want exactly %+v", got.OwnerReferences, wantOwner)
		}
		return nil
	})

	// Deleted by hand: restored.
	must(t, h.c.Delete(context.Background(), rb))
	h.waitBinding(t, ns)

	// The namespace opts out: removed, and not restored.
	var nsObj corev1.Namespace
	must(t, h.c.Get(context.Background(), types.NamespacedName{Name: ns}, &nsObj))
	nsObj.Annotations = map[string]string{v1alpha1.AnnotationSidecarAPIAccess: v1alpha1.SidecarAPIAccessDisabled}
	must(t, h.c.Update(context.Background(), &nsObj))
	h.noBinding(t, ns)
	delete(nsObj.Annotations, v1alpha1.AnnotationSidecarAPIAccess)
	must(t, h.c.Update(context.Background(), &nsObj))
	h.waitBinding(t, ns)

	// The last injected pod goes: removed.
	must(t, h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, client.GracePeriodSeconds(0)))
	h.noBinding(t, ns)
}

func (h *harness) testSidecarLeastPrivilege(t *testing.T) {
	ns := h.namespace(t, "least", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	other := h.namespace(t, "least-other", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	for _, n := range []string{ns, other} {
		h.createPolicy(t, n, "api", nil, upstream("api", "api.least.svc"))
		h.readyPod(t, n, "app", nil)
		h.configMap(t, n)
		h.waitBinding(t, n)
	}
	must(t, h.c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-settings"}}))

	cs, err := kubernetes.NewForConfig(testenv.TokenConfig(h.cfg, testenv.ServiceAccountToken(t, h.cfg, ns, "default")))
	must(t, err)
	for name, f := range sidecarTokenMay(cs, ns) {
		if err := f(); err != nil {
			t.Errorf("%s: %v, want allowed", name, err)
		}
	}
	for name, f := range h.sidecarTokenMayNot(t, cs, ns, other) {
		if err := f(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want Forbidden", name, err)
		}
	}
}

// sidecarPoliciesByName lists or watches only the retry-policies ConfigMap.
var sidecarPoliciesByName = metav1.ListOptions{FieldSelector: "metadata.name=" + v1alpha1.PoliciesConfigMapName}

// sidecarTokenMay are the calls an injected pod's token (cs) makes in its
// namespace ns, each of which the API server must allow.
func sidecarTokenMay(cs kubernetes.Interface, ns string) map[string]func() error {
	ctx := context.Background()
	byName := sidecarPoliciesByName
	return map[string]func() error{
		"get retry-policies": func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, v1alpha1.PoliciesConfigMapName, metav1.GetOptions{})
			return err
		},
		"list retry-policies by name": func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, byName)
			return err
		},
		"watch retry-policies by name": func() error {
			w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, byName)
			if err == nil {
				w.Stop()
			}
			return err
		},
	}
}

// sidecarTokenMayNot are the calls beyond what the sidecar needs, with an
// injected pod's token (cs) of namespace ns or a bystander's, each of which
// the API server must forbid.
func (h *harness) sidecarTokenMayNot(t *testing.T, cs kubernetes.Interface, ns, other string) map[string]func() error {
	ctx := context.Background()
	byName := sidecarPoliciesByName
	return map[string]func() error{
		"get another ConfigMap": func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "app-settings", metav1.GetOptions{})
			return err
		},
		"list every ConfigMap": func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"get retry-policies of another namespace": func() error {
			_, err := cs.CoreV1().ConfigMaps(other).Get(ctx, v1alpha1.PoliciesConfigMapName, metav1.GetOptions{})
			return err
		},
		"watch retry-policies of another namespace": func() error {
			w, err := cs.CoreV1().ConfigMaps(other).Watch(ctx, byName)
			if err == nil {
				w.Stop()
			}
			return err
		},
		"update retry-policies": func() error {
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, v1alpha1.PoliciesConfigMapName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		},
		"delete retry-policies": func() error {
			return cs.CoreV1().ConfigMaps(ns).Delete(ctx, v1alpha1.PoliciesConfigMapName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"get retry-policies as a service account no injected pod runs as": func() error {
			bystander, err := kubernetes.NewForConfig(testenv.TokenConfig(h.cfg, testenv.ServiceAccountToken(t, h.cfg, ns, "bystander")))
			if err != nil {
				return err
			}
			_, err = bystander.CoreV1().ConfigMaps(ns).Get(ctx, v1alpha1.PoliciesConfigMapName, metav1.GetOptions{})
			return err
		},
		"get a Secret": func() error {
			_, err := cs.CoreV1().Secrets(ns).Get(ctx, v1alpha1.PoliciesConfigMapName, metav1.GetOptions{})
			return err
		},
		"list RetryPolicies": func() error {
			var l v1alpha1.RetryPolicyList
			c, err := client.New(testenv.TokenConfig(h.cfg, testenv.ServiceAccountToken(t, h.cfg, ns, "default")), client.Options{Scheme: h.scheme})
			if err != nil {
				return err
			}
			return c.List(ctx, &l, client.InNamespace(ns))
		},
	}
}

func (h *harness) testInjectOnce(t *testing.T) {
	ns := h.namespace(t, "inject", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	h.installRelabeler(t)
	pod := testPod(ns, "app", map[string]string{"app": "web"})
	must(t, h.c.Create(context.Background(), pod))

	if n := h.calls.get(ns + "/app"); n < 2 {
		t.Errorf("pod webhook called %d time(s), want 2 (reinvoked after the relabeler)", n)
	}
	if pod.Labels["test.retry.dev/relabeled"] != "true" {
		t.Errorf("the relabeler did not run: labels %v", pod.Labels)
	}
	var sidecars int
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == podinject.ContainerName {
			sidecars++
		}
	}
	if sidecars != 1 || pod.Spec.InitContainers[0].Name != podinject.ContainerName ||
		*pod.Spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("want exactly one retry-sidecar, first init container, restartPolicy Always; got %d in %+v", sidecars, pod.Spec.InitContainers)
	}
	var proxies int
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "HTTP_PROXY" {
			proxies++
		}
	}
	if proxies != 1 || pod.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
		t.Errorf("HTTP_PROXY set %d times (want 1), labels %v", proxies, pod.Labels)
	}
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["NODE_USE_ENV_PROXY"] != "1" || env["JAVA_TOOL_OPTIONS"] != "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=15001 -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]|kubernetes.default.svc" {
		t.Errorf("Node and Java proxy environment missing: %v", env)
	}
	h.waitEvent(t, ns, "app", podinject.EventInjected)
}

func (h *harness) testKubeSystem(t *testing.T) {
	pod := testPod("kube-system", "must-stay-plain", map[string]string{v1alpha1.LabelPodInject: "true"})
	must(t, h.c.Create(context.Background(), pod))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), pod) })
	if len(pod.Spec.InitContainers) != 0 || len(pod.Spec.Containers[0].Env) != 0 || pod.Labels[v1alpha1.LabelSidecar] != "" {
		t.Errorf("kube-system pod was mutated: %+v", pod.Spec)
	}
	if n := h.calls.get("kube-system/must-stay-plain"); n != 0 {
		t.Errorf("pod webhook called %d time(s) for kube-system, want 0 (namespaceSelector)", n)
	}
}

// namespaceCached waits until the manager's cache (which the pod webhook
// reads) has the namespace, so the webhook decides with its labels.
func (h *harness) namespaceCached(t *testing.T, ns string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		return h.reconciler.Get(context.Background(), types.NamespacedName{Name: ns}, &corev1.Namespace{})
	})
}

func (h *harness) testTransparent(t *testing.T) {
	ns := h.namespace(t, "transparent", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled", v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent})
	h.namespaceCached(t, ns)
	pod := testPod(ns, "app", nil)
	pod.Annotations = map[string]string{v1alpha1.AnnotationInterceptPorts: "80,8080"}
	must(t, h.c.Create(context.Background(), pod))

	inits := pod.Spec.InitContainers
	if len(inits) != 2 || inits[0].Name != podinject.RedirectContainerName || inits[1].Name != podinject.ContainerName {
		t.Fatalf("init containers = %+v, want retry-redirect then retry-sidecar", inits)
	}
	if want := []string{"redirect", "--ports=80,8080", "--to=15006", "--exclude-uid=65532"}; !slices.Equal(inits[0].Args, want) {
		t.Errorf("redirect args = %q, want %q", inits[0].Args, want)
	}
	sc := inits[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.Privileged == nil || *sc.Privileged ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("redirect security context = %+v, want root, not privileged, no escalation, only NET_ADMIN and NET_RAW added", sc)
	}
	if inits[0].RestartPolicy != nil {
		t.Errorf("redirect restartPolicy = %v, want none (it runs to completion before the sidecar)", *inits[0].RestartPolicy)
	}
	if !slices.Contains(inits[1].Args, "--transparent-listen=127.0.0.1:15006") {
		t.Errorf("sidecar args = %q, want --transparent-listen=127.0.0.1:15006", inits[1].Args)
	}
	if env := pod.Spec.Containers[0].Env; len(env) != 0 {
		t.Errorf("app env = %v, want none with transparent interception", env)
	}
	h.waitEvent(t, ns, "app", podinject.EventInjected)
}

func (h *harness) testTransparentBadPorts(t *testing.T) {
	ns := h.namespace(t, "bad-ports", nil)
	pod := testPod(ns, "app", map[string]string{v1alpha1.LabelPodInject: "true", v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent})
	pod.Annotations = map[string]string{v1alpha1.AnnotationInterceptPorts: "80,443"}
	must(t, h.c.Create(context.Background(), pod))
	if pod.Spec.InitContainers[0].Name != podinject.ContainerName || pod.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
		t.Fatalf("want the sidecar without the redirect container; init containers %+v", pod.Spec.InitContainers)
	}
	if env := pod.Spec.Containers[0].Env; len(env) == 0 || env[0].Name != "HTTP_PROXY" {
		t.Errorf("app env = %v, want the proxy environment", env)
	}
	h.waitEvent(t, ns, "app", podinject.EventInterceptionFallback)
}

func (h *harness) testTransparentRestricted(t *testing.T) {
	ns := h.namespace(t, "restricted", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled",
		v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent, "pod-security.kubernetes.io/enforce": "restricted"})
	h.namespaceCached(t, ns)
	restricted := func(name string, labels map[string]string) *corev1.Pod {
		p := testPod(ns, name, labels)
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		return p
	}
	// What the fallback avoids: the API server refuses NET_ADMIN here.
	netAdmin := restricted("net-admin", map[string]string{v1alpha1.LabelPodInject: "false"})
	netAdmin.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
	if err := h.c.Create(context.Background(), netAdmin); !apierrors.IsForbidden(err) {
		t.Fatalf("a NET_ADMIN pod in a restricted namespace: err = %v, want Forbidden by Pod Security", err)
	}

	pod := restricted("app", nil)
	h.warnings.reset()
	must(t, h.c.Create(context.Background(), pod))
	for _, c := range pod.Spec.InitContainers {
		if c.Name == podinject.RedirectContainerName {
			t.Fatalf("the redirect init container was added in a restricted namespace: %+v", pod.Spec.InitContainers)
		}
	}
	var proxy string
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "HTTP_PROXY" {
			proxy = e.Value
		}
	}
	if proxy != "http://127.0.0.1:15001" {
		t.Errorf("HTTP_PROXY = %q, want the proxy environment as the fallback", proxy)
	}
	want := `namespace restricted enforces Pod Security "restricted", which refuses the NET_ADMIN and NET_RAW capabilities transparent interception needs; the proxy environment is used (a CNI-based redirect avoids the capabilities, docs/clients.md)`
	if got := h.warnings.get(); !slices.Contains(got, want) {
		t.Errorf("admission warnings = %q, want %q", got, want)
	}
	h.waitEvent(t, ns, "app", podinject.EventInterceptionFallback)
}

func (h *harness) testWebhookScope(t *testing.T) {
	ns := h.namespace(t, "scope", nil) // not labelled retry.dev/injection
	plain := testPod(ns, "plain", map[string]string{"app": "web"})
	must(t, h.c.Create(context.Background(), plain))
	if n := h.calls.get(ns + "/plain"); n != 0 || len(plain.Spec.InitContainers) != 0 {
		t.Errorf("a pod nobody opted in: webhook called %d time(s), %d init containers; want 0 and 0", n, len(plain.Spec.InitContainers))
	}
	optIn := testPod(ns, "opt-in", map[string]string{v1alpha1.LabelPodInject: "true"})
	must(t, h.c.Create(context.Background(), optIn))
	if n := h.calls.get(ns + "/opt-in"); n != 1 || optIn.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
		t.Errorf("a pod labelled %s=true: webhook called %d time(s), labels %v; want 1 call and injected", v1alpha1.LabelPodInject, n, optIn.Labels)
	}

	enabled := h.namespace(t, "scope-enabled", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	both := testPod(enabled, "both", map[string]string{v1alpha1.LabelPodInject: "true"})
	must(t, h.c.Create(context.Background(), both))
	if n := h.calls.get(enabled + "/both"); n != 1 || both.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
		t.Errorf("a pod opted in twice (namespace and label): webhook called %d time(s), labels %v; want 1 call and injected", n, both.Labels)
	}
	out := testPod(enabled, "opted-out", map[string]string{v1alpha1.LabelPodInject: "false"})
	must(t, h.c.Create(context.Background(), out))
	if n := h.calls.get(enabled + "/opted-out"); n != 0 || len(out.Spec.InitContainers) != 0 {
		t.Errorf("a pod labelled %s=false: webhook called %d time(s); want 0, untouched", v1alpha1.LabelPodInject, n)
	}
}

func (h *harness) testPrinterColumns(t *testing.T) {
	ns := h.namespace(t, "columns", map[string]string{v1alpha1.LabelNamespaceInjection: "enabled"})
	h.createPolicy(t, ns, "three", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		upstream("a", "a.columns.svc"), upstream("b", "b.columns.svc"), upstream("c", "c.columns.svc"))
	h.waitAccepted(t, ns, "three", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	time.Sleep(1100 * time.Millisecond) // creationTimestamp resolution: "loser" is newer
	// Overlaps "three" (a pod may carry both labels) but selects no pod: Pods 0.
	h.createPolicy(t, ns, "loser", &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}, upstream("a", "a.columns.svc"))
	h.waitAccepted(t, ns, "loser", metav1.ConditionFalse, string(v1alpha1.ReasonConflict))
	h.readyPod(t, ns, "web-0", map[string]string{"app": "web"})
	polltest.Until(t, 10*time.Second, func() error {
		if n := h.policy(t, ns, "three").Status.SelectedPods; n != 1 {
			return fmt.Errorf("three: selectedPods %d, want 1", n)
		}
		return nil
	})

	// The server-side Table that kubectl renders.
	rc, err := rest.HTTPClientFor(h.cfg)
	must(t, err)
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(h.cfg.Host, "/")+"/apis/policy.retry.dev/v1alpha1/namespaces/"+ns+"/retrypolicies", nil)
	must(t, err)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := rc.Do(req)
	must(t, err)
	defer resp.Body.Close()
	var table metav1.Table
	must(t, json.NewDecoder(resp.Body).Decode(&table))
	var cols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if want := []string{"Name", "Accepted", "Programmed", "Upstreams", "Pods", "Programmed-Pods", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns = %q, want %q", cols, want)
	}
	var rows []string
	for _, r := range table.Rows {
		rows = append(rows, strings.TrimSpace(fmt.Sprintln(r.Cells[:5]...)))
	}
	if want := []string{"loser False False 1 0", "three True True 3 1"}; !slices.Equal(rows, want) {
		t.Errorf("rows = %q, want %q", rows, want)
	}

	// And kubectl itself, by the short name: what a user types (the category
	// "retry" also lists SharedQuotas, with kind-prefixed names).
	user, err := h.env.ControlPlane.AddUser(envtest.User{Name: "printer-columns", Groups: []string{"system:masters"}}, nil)
	must(t, err)
	kubectl, err := user.Kubectl()
	must(t, err)
	kubectl.Path = filepath.Join(testenv.Assets(t), "kubectl")
	stdout, stderr, err := kubectl.Run("get", "rp", "-n", ns)
	if err != nil {
		errOut, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl get rp: %v: %s", err, errOut)
	}
	raw, _ := io.ReadAll(stdout)
	t.Logf("kubectl get rp -n %s:\n%s", ns, raw)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(l)
		lines = append(lines, strings.Join(f[:len(f)-1], " ")) // without AGE's value
	}
	if want := []string{
		"NAME ACCEPTED PROGRAMMED UPSTREAMS PODS PROGRAMMED-PODS",
		"loser False False 1 0 0",
		"three True True 3 1 0", // no sidecar answers /config in this namespace
	}; !slices.Equal(lines, want) {
		t.Errorf("kubectl get rp:\n%s\nwant (AGE aside):\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if all, _, err := kubectl.Run("get", "rp", "-A"); err == nil { // every namespace of this run, for the log
		raw, _ := io.ReadAll(all)
		t.Logf("kubectl get rp -A:\n%s", raw)
	}
	ready := meta.FindStatusCondition(h.policy(t, ns, "three").Status.Conditions, string(v1alpha1.ConditionReady))
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != string(v1alpha1.ReasonReconciled) || ready.ObservedGeneration != 1 {
		t.Errorf("Ready of three = %+v, want True/Reconciled at generation 1", ready)
	}
}

func (h *harness) testInvalidBypassingWebhook(t *testing.T) {
	ns := h.namespace(t, "bypass", nil)
	h.createPolicy(t, ns, "api", nil, upstream("api", "api.bypass.svc"))
	h.waitAccepted(t, ns, "api", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	before := h.configMap(t, ns).Data[v1alpha1.PoliciesConfigMapKey]

	must(t, h.c.Delete(context.Background(), &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "validating-webhook-configuration"}}))
	// The API server drops the webhook asynchronously: retry until the update
	// (legal for the CRD schema, illegal for Validate) gets through.
	polltest.Until(t, 20*time.Second, func() error {
		p := h.policy(t, ns, "api")
		p.Spec.Upstreams[0].Hosts = []string{"API.bypass.svc"}
		return h.c.Update(context.Background(), p)
	})

	p := h.waitAccepted(t, ns, "api", metav1.ConditionFalse, string(v1alpha1.ReasonInvalid))
	acc := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
	want := `spec.upstreams[0].hosts[0]: Invalid value: "API.bypass.svc": must be lower-case (api.bypass.svc); must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case; generation 1, the last accepted, stays in force`
	if acc.Message != want || acc.ObservedGeneration != 2 {
		t.Errorf("Accepted = %+v\nwant message %q at generation 2", acc, want)
	}
	if prog := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionProgrammed)); prog.Status != metav1.ConditionTrue ||
		!strings.HasPrefix(prog.Message, "0/0 pods run generation 1 ") {
		t.Errorf("Programmed = %+v, want True for generation 1", prog)
	}
	if after := h.configMap(t, ns).Data[v1alpha1.PoliciesConfigMapKey]; after != before {
		t.Errorf("the last accepted rendering changed:\n%s\nwas:\n%s", after, before)
	}
	h.waitEvent(t, ns, "api", string(v1alpha1.ReasonInvalid))

	// The ConfigMap is lost, then edited by hand with garbage: each time the
	// manager renders generation 1 again from status.lastAccepted, with a
	// revision past the last one, so no sidecar refuses it.
	prevDoc, err := policyset.Unmarshal([]byte(before))
	must(t, err)
	cm := h.configMap(t, ns)
	must(t, h.c.Delete(context.Background(), cm))
	restored := h.waitRendering(t, ns, cm.UID, prevDoc)
	restored.Data[v1alpha1.PoliciesConfigMapKey] = "{garbage"
	must(t, h.c.Update(context.Background(), restored))
	h.waitRendering(t, ns, "", prevDoc)
}

// ---- helpers ----

func (h *harness) namespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	must(t, h.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
	return name
}

func upstream(name string, hosts ...string) v1alpha1.Upstream {
	return v1alpha1.Upstream{Name: name, Hosts: hosts}
}

func policy(ns, name string, sel *metav1.LabelSelector, ups ...v1alpha1.Upstream) *v1alpha1.RetryPolicy {
	return &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RetryPolicySpec{PodSelector: sel, Upstreams: ups}}
}

func (h *harness) createPolicy(t *testing.T, ns, name string, sel *metav1.LabelSelector, ups ...v1alpha1.Upstream) *v1alpha1.RetryPolicy {
	t.Helper()
	p := policy(ns, name, sel, ups...)
	must(t, h.c.Create(context.Background(), p))
	return p
}

func (h *harness) policy(t *testing.T, ns, name string) *v1alpha1.RetryPolicy {
	t.Helper()
	var p v1alpha1.RetryPolicy
	must(t, h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p))
	return &p
}

func (h *harness) configMap(t *testing.T, ns string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	polltest.Until(t, 10*time.Second, func() error {
		return h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &cm)
	})
	return &cm
}

func (h *harness) waitAccepted(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *v1alpha1.RetryPolicy {
	t.Helper()
	var p *v1alpha1.RetryPolicy
	polltest.Until(t, 10*time.Second, func() error {
		p = h.policy(t, ns, name)
		c := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != p.Generation {
			return fmt.Errorf("Accepted = %+v at generation %d, want %s/%s", c, p.Generation, status, reason)
		}
		return nil
	})
	return p
}

func (h *harness) waitObserved(t *testing.T, ns, name string, gen int64) *v1alpha1.RetryPolicy {
	t.Helper()
	var p *v1alpha1.RetryPolicy
	polltest.Until(t, 10*time.Second, func() error {
		p = h.policy(t, ns, name)
		if p.Status.ObservedGeneration != gen {
			return fmt.Errorf("observedGeneration %d, want %d", p.Status.ObservedGeneration, gen)
		}
		return nil
	})
	return p
}

func (h *harness) waitShare(t *testing.T, ns string, share float64, burst, pods int32) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		doc, err := policyset.Unmarshal([]byte(h.configMap(t, ns).Data[v1alpha1.PoliciesConfigMapKey]))
		if err != nil {
			return err
		}
		if got := doc.Policies[0].Upstreams[0].PodRequestsPerMinute; got != share {
			return fmt.Errorf("podRequestsPerMinute = %v, want %v", got, share)
		}
		if got := doc.Policies[0].Upstreams[0].PodBurst; got != burst {
			return fmt.Errorf("podBurst = %v, want %v", got, burst)
		}
		if got := h.policy(t, ns, "quota").Status.SelectedPods; got != pods {
			return fmt.Errorf("status.selectedPods = %d, want %d", got, pods)
		}
		return nil
	})
}

// waitRendering waits for a ConfigMap other than the one with UID gone (any,
// when gone is empty) that renders the policies of prev, with the same content
// and a higher revision.
func (h *harness) waitRendering(t *testing.T, ns string, gone types.UID, prev policyset.Document) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	polltest.Until(t, 10*time.Second, func() error {
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &cm); err != nil {
			return err
		}
		if cm.UID == gone {
			return errors.New("the deleted ConfigMap is still there")
		}
		doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
		if err != nil {
			return err
		}
		if doc.Revision <= prev.Revision {
			return fmt.Errorf("revision %d, want more than %d", doc.Revision, prev.Revision)
		}
		doc.Revision = prev.Revision
		got, err := policyset.Marshal(doc)
		must(t, err)
		want, err := policyset.Marshal(prev)
		must(t, err)
		if string(got) != string(want) {
			return fmt.Errorf("rendered\n%s\nwant\n%s", got, want)
		}
		return nil
	})
	return &cm
}

func (h *harness) waitProgrammed(t *testing.T, ns, name string, programmed, selected int32) *v1alpha1.RetryPolicy {
	t.Helper()
	var p *v1alpha1.RetryPolicy
	polltest.Until(t, 15*time.Second, func() error {
		p = h.policy(t, ns, name)
		prog := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionProgrammed))
		want := fmt.Sprintf("%d/%d pods run generation %d ", programmed, selected, p.Generation)
		if p.Status.ProgrammedPods != programmed || p.Status.SelectedPods != selected || prog == nil || !strings.HasPrefix(prog.Message, want) {
			return fmt.Errorf("programmedPods %d selectedPods %d Programmed %+v; want %d, %d and %q", p.Status.ProgrammedPods,
				p.Status.SelectedPods, prog, programmed, selected, want)
		}
		return nil
	})
	return p
}

func (h *harness) waitBinding(t *testing.T, ns string) *rbacv1.RoleBinding {
	t.Helper()
	var rb rbacv1.RoleBinding
	polltest.Until(t, 10*time.Second, func() error {
		return h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controller.SidecarRoleBindingName}, &rb)
	})
	return &rb
}

// waitSubjects waits until the sidecars' RoleBinding of ns names exactly the
// service accounts accounts of ns, in that order.
func (h *harness) waitSubjects(t *testing.T, ns string, accounts ...string) *rbacv1.RoleBinding {
	t.Helper()
	want := make([]rbacv1.Subject, len(accounts))
	for i, sa := range accounts {
		want[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}
	}
	var rb rbacv1.RoleBinding
	polltest.Until(t, 10*time.Second, func() error {
		if err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controller.SidecarRoleBindingName}, &rb); err != nil {
			return err
		}
		if !slices.Equal(rb.Subjects, want) {
			return fmt.Errorf("RoleBinding subjects %+v, want %+v", rb.Subjects, want)
		}
		return nil
	})
	return &rb
}

func (h *harness) noBinding(t *testing.T, ns string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		err := h.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controller.SidecarRoleBindingName}, &rbacv1.RoleBinding{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("RoleBinding %s/%s still there (err=%w)", ns, controller.SidecarRoleBindingName, err)
		}
		return nil
	})
}

func revisionOf(t *testing.T, cm *corev1.ConfigMap) int64 {
	t.Helper()
	doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
	must(t, err)
	return doc.Revision
}

// fakeSidecars answers GET /config for the envtest pods (which run no
// containers): revision 0 until set says otherwise. It counts the calls.
type fakeSidecars struct {
	srv *httptest.Server
	mu  sync.Mutex
	rev map[string]int64 // namespace/pod -> revision
	n   map[string]int   // namespace -> calls
}

func newFakeSidecars(t *testing.T) *fakeSidecars {
	f := &fakeSidecars{rev: map[string]int64{}, n: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, pod := r.URL.Query().Get("namespace"), r.URL.Query().Get("pod")
		f.mu.Lock()
		rev := f.rev[ns+"/"+pod]
		f.n[ns]++
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(policyset.ConfigStatus{Revision: rev, Hash: "sha256:test", Source: "api"})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSidecars) url(p *corev1.Pod) string {
	return f.srv.URL + "/config?namespace=" + p.Namespace + "&pod=" + p.Name
}

func (f *fakeSidecars) set(ns, pod string, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev[ns+"/"+pod] = rev
}

func (f *fakeSidecars) calls(ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[ns]
}

func (h *harness) waitEvent(t *testing.T, ns, regarding, reason string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		var evs eventsv1.EventList
		if err := h.c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == regarding && e.Reason == reason {
				return nil
			}
		}
		return fmt.Errorf("no event %s regarding %s/%s", reason, ns, regarding)
	})
}

func testPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
}

// readyPod creates a pod through the webhook (which injects it) and marks it
// Ready, as the kubelet would.
func (h *harness) readyPod(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	h.readyPodOf(t, testPod(ns, name, labels))
}

// readyPodAs is readyPod of a pod running as service account sa (created
// when missing).
func (h *harness) readyPodAs(t *testing.T, ns, name, sa string) {
	t.Helper()
	err := h.c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := testPod(ns, name, nil)
	pod.Spec.ServiceAccountName = sa
	h.readyPodOf(t, pod)
}

func (h *harness) readyPodOf(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	name := pod.Name
	must(t, h.c.Create(context.Background(), pod))
	if pod.Labels[v1alpha1.LabelSidecar] != v1alpha1.LabelSidecarInjected {
		t.Fatalf("pod %s not injected: labels %v", name, pod.Labels)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	must(t, h.c.Status().Update(context.Background(), pod))
}

func (h *harness) installRelabeler(t *testing.T) {
	t.Helper()
	url := fmt.Sprintf("https://%s:%d/test-relabel", h.wio.LocalServingHost, h.wio.LocalServingPort)
	cfg := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-test-relabeler"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    "relabel.test.retry.dev",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &url, CABundle: h.wio.LocalServingCAData},
			Rules:                   []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create}, Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionv1.IfNeededReinvocationPolicy),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "inject"}},
		}},
	}
	must(t, h.c.Create(context.Background(), cfg))
	// Wait until the API server calls it: a throwaway pod comes back relabelled.
	polltest.Until(t, 20*time.Second, func() error {
		probe := testPod("inject", fmt.Sprintf("probe-%d", time.Now().UnixNano()), nil)
		probe.Labels = map[string]string{v1alpha1.LabelPodInject: "false"}
		if err := h.c.Create(context.Background(), probe); err != nil {
			return err
		}
		if probe.Labels["test.retry.dev/relabeled"] != "true" {
			return errors.New("relabeler not active yet")
		}
		return nil
	})
}

func relabel(_ context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(400, err)
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["test.retry.dev/relabeled"] = "true"
	pod.Labels["test.retry.dev/relabel-count"] += "x" // a change on every call, so ours is reinvoked
	raw, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(500, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

func render(t *testing.T, p *v1alpha1.RetryPolicy, pods int32, revision int64) []byte {
	t.Helper()
	rp := policyset.Policy{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation, PodSelector: p.Spec.PodSelector}
	for _, u := range p.Spec.Upstreams {
		ru, err := policyset.RenderUpstream(u, pods)
		must(t, err)
		rp.Upstreams = append(rp.Upstreams, ru)
	}
	data, err := policyset.Marshal(policyset.Document{Revision: revision, Policies: []policyset.Policy{rp}})
	must(t, err)
	return data
}

func renderedNames(cm *corev1.ConfigMap, want ...string) error {
	doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
	if err != nil {
		return err
	}
	var got []string
	for _, p := range doc.Policies {
		got = append(got, p.Name)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("rendered policies %v, want %v", got, want)
	}
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// callCounter counts pod webhook invocations per namespace/name.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) wrap(h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		c.mu.Lock()
		c.n[req.Namespace+"/"+req.Name]++
		c.mu.Unlock()
		return h.Handle(ctx, req)
	})
}

func (c *callCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// warningLog collects the API server's warnings (admission.Warnings).
type warningLog struct {
	mu sync.Mutex
	w  []string
}

func (l *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = append(l.w, text)
}

func (l *warningLog) reset() { l.mu.Lock(); l.w = nil; l.mu.Unlock() }

func (l *warningLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.w)
}
