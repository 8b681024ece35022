// Package manager wires retry-operator's manager: the RetryPolicy reconciler
// and the two webhooks, on a controller-runtime manager. cmd/manager, the
// envtest suite and the scale benchmark all build their manager through it, so
// the tests run the wiring the binary runs (docs/manager.md).
package manager

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/storeadmin"
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
	// CARecheck is how often the ConfigMaps named in tls.caCertificateRefs
	// are read again; 0 is controller.DefaultCARecheck.
	CARecheck time.Duration
	// WrapInject wraps the pod webhook's handler (tests count or time the
	// calls); nil: the handler as it is.
	WrapInject func(admission.Handler) admission.Handler
	// WrapGuard wraps the handler of the guard of injected containers, as
	// WrapInject.
	WrapGuard func(admission.Handler) admission.Handler
	// QuotaLease is the lease endpoint of SharedQuotas.
	QuotaLease QuotaLease
}

// QuotaLease configures the lease endpoint of SharedQuotas, which every
// replica serves (docs/quota.md#trust).
type QuotaLease struct {
	// Endpoint is what the rendered quotas tell the sidecars.
	Endpoint controller.LeaseEndpoint
	// Addr is where every replica serves it (--quota-lease-bind-address);
	// empty, with no Listener: not served.
	Addr string
	// Listener, when not nil, is served instead of Addr (tests).
	Listener net.Listener
	// CertFile and KeyFile are the serving certificate, the webhook's.
	CertFile, KeyFile string
	// Auth verifies the sidecars' tokens; nil: TokenReviews through the
	// manager's client.
	Auth leaseserver.Authenticator
}

// LeaderElectionID is the name of the Lease the manager's replicas elect a
// leader with; config/rbac/leader_election_role.yaml lets the manager renew
// this Lease only.
const LeaderElectionID = "retry-operator.retry.dev"

// Scheme is the manager's scheme: the built-in types, RetryPolicy, and the
// Gateway API kinds it reads when the cluster serves them.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(gwv1.Install(s))
	utilruntime.Must(gwxv1a1.Install(s))
	return s
}

// Options returns o with the manager's scheme and cache settings, which the
// reconciler relies on (it caches only what it owns, cut down:
// controller.CacheOptions).
func Options(o ctrl.Options) ctrl.Options {
	o.Scheme = Scheme()
	o.Cache = controller.CacheOptions()
	return o
}

// Setup adds the controllers to mgr (SetupControllers), and the webhooks when
// o.Webhooks: one manager doing both, as the envtest suite runs it. It
// returns the reconciler (tests call it directly).
func Setup(mgr ctrl.Manager, o SetupOptions) (*controller.RetryPolicyReconciler, error) {
	rec, err := SetupControllers(mgr, o)
	if err != nil {
		return nil, err
	}
	if err := SetupQuotaLease(mgr, o); err != nil {
		return nil, err
	}
	if o.Webhooks {
		if err := SetupWebhooks(mgr, o); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// SetupControllers adds the leader's work to mgr: the RetryPolicy and
// SharedQuota reconcilers. cmd/manager runs them in a term's manager
// (Terms), the webhooks in the replica's own.
func SetupControllers(mgr ctrl.Manager, o SetupOptions) (*controller.RetryPolicyReconciler, error) {
	admin := storeadmin.Admin{Reader: mgr.GetAPIReader(), Namespace: cmp.Or(o.OperatorNamespace, v1alpha1.OperatorNamespace)}
	pool := &storeadmin.Pool{Admin: admin}
	gateway, err := controller.DetectGatewayAPI(mgr.GetRESTMapper())
	if err != nil {
		return nil, err
	}
	mgr.GetLogger().WithName("gateway-api").Info("Gateway API kinds served by the cluster; routes with a Service parent are rendered when HTTPRoutes are",
		"httproutes", gateway.HTTPRoutes, "xbackendtrafficpolicies", gateway.BackendTrafficPolicies)
	rec := &controller.RetryPolicyReconciler{
		GatewayAPI:              gateway,
		Client:                  mgr.GetClient(),
		QuotaLease:              o.QuotaLease.Endpoint,
		Reader:                  mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("retrypolicy-controller"),
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		SidecarClusterRole:      o.SidecarClusterRole,
		SidecarConfigURL:        o.SidecarConfigURL,
		CARecheck:               o.CARecheck,
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the RetryPolicy controller: %w", err)
	}
	if gateway.HTTPRoutes {
		if err := (&controller.HTTPRouteStatusReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the HTTPRoute status controller: %w", err)
		}
	}
	quotas := &controller.SharedQuotaReconciler{
		Client:       mgr.GetClient(),
		Store:        admin,
		Recorder:     mgr.GetEventRecorder("sharedquota-controller"),
		StoreRecheck: o.StoreRecheck,
		Forget: func(ctx context.Context, q *v1alpha1.SharedQuota, ns string) error {
			s, err := pool.Store(ctx, q.Spec.Store.Redis)
			if err != nil {
				return err
			}
			return s.Forget(ctx, policyset.QuotaSpec(q), ns)
		},
	}
	if err := quotas.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the SharedQuota controller: %w", err)
	}
	return rec, nil
}

// SetupQuotaLease adds the quota lease endpoint to mgr, when o.QuotaLease
// says where to serve it: every replica serves it (cmd/manager: in the
// replica's own manager, not a term's), with a pool of store connections of
// its own. Its SharedQuota and Namespace reads go through mgr's cache, whose
// informers it starts.
func SetupQuotaLease(mgr ctrl.Manager, o SetupOptions) error {
	l := o.QuotaLease
	if l.Addr == "" && l.Listener == nil {
		return nil
	}
	admin := storeadmin.Admin{Reader: mgr.GetAPIReader(), Namespace: cmp.Or(o.OperatorNamespace, v1alpha1.OperatorNamespace)}
	pool := &storeadmin.Pool{Admin: admin}
	auth := l.Auth
	if auth == nil {
		auth = leaseserver.NewTokenReviewer(mgr.GetClient(), nil)
	}
	stores := leaseserver.StoresFunc(func(ctx context.Context, s v1alpha1.RedisStore) (leaseserver.Store, error) {
		return pool.Store(ctx, s)
	})
	log := mgr.GetLogger().WithName("quota-lease")
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for _, o := range []client.Object{&v1alpha1.SharedQuota{}, &corev1.Namespace{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
				return err
			}
		}
		return nil
	})); err != nil {
		return err
	}
	h := leaseserver.New(auth, leaseserver.ClusterQuotas{Reader: mgr.GetClient()}, stores, log, nil)
	return mgr.Add(&leaseserver.Listener{Addr: l.Addr, Listener: l.Listener, CertFile: l.CertFile, KeyFile: l.KeyFile, Handler: h, Log: log})
}

// SetupWebhooks registers the RetryPolicy and SharedQuota validating webhooks,
// the pod injecting webhook and the guard of injected containers on mgr's
// webhook server.
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
	var guard admission.Handler = podinject.NewGuard(mgr)
	if o.WrapGuard != nil {
		guard = o.WrapGuard(guard)
	}
	mgr.GetWebhookServer().Register(podinject.GuardPath, &webhook.Admission{Handler: guard})
	return nil
}
