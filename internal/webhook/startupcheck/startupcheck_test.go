package startupcheck

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	webhookv1alpha1 "github.com/retrydev/retry-operator/internal/webhook/v1alpha1"
)

// The check is refused while the validating webhook does not answer (the
// failure a user's first apply met right after an install), is admitted as
// soon as it does, with no more rights than the chart's hook has, and never
// stores its probe.
func TestTheCheckPassesOnceTheWebhookAnswers(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg := testenv.Start(t, env)
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns, sa = "retry-operator-system", "retry-operator-startupapicheck"
	hookRights(t, admin, ns, sa)
	hook, err := client.New(testenv.TokenConfig(cfg, testenv.ServiceAccountToken(t, cfg, ns, sa)), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	check := Check{Client: hook, Namespace: ns, Interval: 100 * time.Millisecond, Log: zap.New(zap.UseDevMode(true))}

	err = check.Once(ctx)
	if err == nil || !strings.Contains(err.Error(), "validate.retrypolicy.retry.dev") {
		t.Fatalf("with no webhook server: %v, want a refusal naming the validating webhook", err)
	}

	serveWebhooks(t, cfg, scheme, &env.WebhookInstallOptions)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tries, err := check.Run(rctx)
	if err != nil {
		t.Fatalf("after %d tries with the webhook server up: %v", tries, err)
	}
	var stored v1alpha1.RetryPolicy
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: ProbeName}, &stored); !apierrors.IsNotFound(err) {
		t.Errorf("the probe policy was stored (get: %v); a dry run must leave nothing", err)
	}
	t.Logf("admitted after %d tries", tries)
}

// A check that never gets through ends at its deadline with the last
// refusal, so the hook's log says why the install did not become usable.
func TestTheCheckGivesUpWithTheLastRefusal(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg := testenv.Start(t, env)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tries, err := Check{Client: c, Namespace: "ops", Interval: 200 * time.Millisecond, Log: zap.New()}.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not work within the timeout") || !strings.Contains(err.Error(), "validate.retrypolicy.retry.dev") {
		t.Fatalf("Run = %v, want the timeout and the webhook's refusal", err)
	}
	if tries < 2 {
		t.Errorf("%d tries in 5 s at 200 ms, want several", tries)
	}
}

// hookRights gives sa what dist/chart/templates/startupapicheck.yaml gives
// the hook: create on retrypolicies in ns.
func hookRights(t *testing.T, c client.Client, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"retrypolicies"}, Verbs: []string{"create"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// serveWebhooks runs the real RetryPolicy webhooks where the API server's
// webhook configuration points.
func serveWebhooks(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, wio *envtest.WebhookInstallOptions) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhookv1alpha1.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// refusingThenHanging refuses the first Create as the webhook would, and
// holds every later one until its context ends: a try still in flight when
// the check's deadline strikes. Only Create is called by Check.
type refusingThenHanging struct {
	client.Client
	creates int
}

func (r *refusingThenHanging) Create(ctx context.Context, _ client.Object, _ ...client.CreateOption) error {
	if r.creates++; r.creates == 1 {
		return errors.New(`admission webhook "validate.retrypolicy.retry.dev" denied the request`)
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestATryCutByTheDeadlineKeepsTheRefusalBeforeIt: the check reports why
// admission failed, not that its own deadline cut the last try (the cause
// of a failure of TestTheCheckGivesUpWithTheLastRefusal on a loaded machine).
func TestATryCutByTheDeadlineKeepsTheRefusalBeforeIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tries, err := Check{Client: &refusingThenHanging{}, Namespace: "ops", Interval: 10 * time.Millisecond, Log: zap.New()}.Run(ctx)
	want := `admission did not work within the timeout, last error: admission webhook "validate.retrypolicy.retry.dev" denied the request`
	if tries != 2 || err == nil || err.Error() != want {
		t.Fatalf("Run = %d tries, %v; want 2 tries, %s", tries, err, want)
	}
}
