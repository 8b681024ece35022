// Package manager wires retry-operator's manager: the RetryPolicy reconciler
// and the two webhooks, on a controller-runtime manager. cmd/manager, the
// envtest suite and the scale benchmark all build their manager through it, so
// the tests run the wiring the binary runs (docs/manager.md).
package manager

import (
	"cmp"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/quotastore"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
	webhookv1alpha1 "github.com/retrydev/retry-operator/internal/webhook/v1alpha1"
)

// SetupOptions are what differs between the binary and its tests.
type SetupOptions struct {
	// MaxConcurrentReconciles bounds how many namespaces are reconciled at once.
	MaxConcurrentReconciles int
	// SidecarClusterRole is bound in every namespace with injected pods; empty
	// is controller.DefaultSidecarClusterRole.
	SidecarClusterRole string
	// SidecarConfigURL is where a pod's sidecar answers GET /config; nil is
	// controller.DefaultSidecarConfigURL.
	SidecarConfigURL func(*corev1.Pod) string
	// Webhooks registers the RetryPolicy and pod webhooks in Setup. False: the
	// caller registers them later with SetupWebhooks (once the serving
	// certificate exists), or never (webhooks disabled).
	Webhooks bool
	// Inject configures the pod webhook.
	Inject podinject.Config
	// OperatorNamespace is the manager's namespace, where a SharedQuota's
	// store.redis.credentialsSecretRef points; empty is v1alpha1.OperatorNamespace.
	OperatorNamespace string
	// StoreRecheck is how often a SharedQuota's store is pinged again; 0 is
	// controller.DefaultStoreRecheck.
	StoreRecheck time.Duration
	// WrapInject wraps the pod webhook's handler (tests count or time the
	// calls); nil: the handler as it is.
	WrapInject func(admission.Handler) admission.Handler
}

// LeaderElectionID is the name of the Lease the manager's replicas elect a
// leader with; config/rbac/leader_election_role.yaml lets the manager renew
// this Lease only.
const LeaderElectionID = "retry-operator.retry.dev"

// Scheme is the manager's scheme: the built-in types and RetryPolicy.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// Options returns o with the manager's scheme and cache settings, which the
// reconciler relies on (it caches only injected pods).
func Options(o ctrl.Options) ctrl.Options {
	o.Scheme = Scheme()
	o.Cache = controller.CacheOptions()
	return o
}

// Setup adds the RetryPolicy reconciler to mgr, and the webhooks when
// o.Webhooks. It returns the reconciler (tests call it directly).
func Setup(mgr ctrl.Manager, o SetupOptions) (*controller.RetryPolicyReconciler, error) {
	admin := quotastore.Admin{Reader: mgr.GetAPIReader(), Namespace: cmp.Or(o.OperatorNamespace, v1alpha1.OperatorNamespace)}
	rec := &controller.RetryPolicyReconciler{
		Client:                  mgr.GetClient(),
		QuotaStore:              admin,
		Reader:                  mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("retrypolicy-controller"),
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		SidecarClusterRole:      o.SidecarClusterRole,
		SidecarConfigURL:        o.SidecarConfigURL,
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the RetryPolicy controller: %w", err)
	}
	quotas := &controller.SharedQuotaReconciler{
		Client:       mgr.GetClient(),
		Store:        admin,
		Recorder:     mgr.GetEventRecorder("sharedquota-controller"),
		StoreRecheck: o.StoreRecheck,
	}
	if err := quotas.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the SharedQuota controller: %w", err)
	}
	if o.Webhooks {
		if err := SetupWebhooks(mgr, o); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// SetupWebhooks registers the RetryPolicy validating webhook and the pod
// injecting webhook on mgr's webhook server.
func SetupWebhooks(mgr ctrl.Manager, o SetupOptions) error {
	if err := webhookv1alpha1.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RetryPolicy webhook: %w", err)
	}
	if err := webhookv1alpha1.SetupQuotaWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SharedQuota webhook: %w", err)
	}
	if err := podinject.WarmCache(mgr); err != nil {
		return err
	}
	var h admission.Handler = podinject.NewHandler(mgr, o.Inject)
	if o.WrapInject != nil {
		h = o.WrapInject(h)
	}
	mgr.GetWebhookServer().Register(podinject.Path, &webhook.Admission{Handler: h})
	return nil
}
