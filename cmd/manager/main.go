// Command manager runs the RetryPolicy controller and the two admission
// webhooks (RetryPolicy validation, pod sidecar injection). Flags follow
// kubebuilder's conventions; the README ("The manager", Flags) documents each one.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	// Every client-go auth plugin (OIDC, exec, cloud providers), for --kubeconfig.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/webhook/certready"
	"github.com/retrydev/retry-operator/internal/webhook/certrepair"
	"github.com/retrydev/retry-operator/internal/webhook/certsync"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

var (
	scheme   = manager.Scheme()
	setupLog = ctrl.Log.WithName("setup")
)

type options struct {
	metricsAddr, probeAddr                           string
	secureMetrics, enableHTTP2, leaderElect          bool
	metricsCertPath, metricsCertName, metricsCertKey string
	webhookCertPath, webhookCertName, webhookCertKey string
	webhookPort                                      int

	certSecret                       string
	certHosts                        string
	webhookURLHost                   string
	mutatingConfig, validatingConfig string

	operatorNamespace       string
	sidecarImage            string
	sidecarPullPolicy       string
	sidecarPullSecrets      string
	sidecarNoProxy          string
	sidecarTokenAudience    string
	sidecarCPURequest       string
	sidecarMemoryRequest    string
	sidecarMemoryLimit      string
	maxConcurrentReconciles int
	sidecarClusterRole      string
	tracingEndpoint         string
	tracingSamplingRatio    float64

	quotaLeaseAddr    string
	quotaLeaseService string
}

// caFile is the CA of the serving certificate in the certificate directory:
// cert-manager's Secret has it, and certsync copies it from the self-signed
// one. The quota lease endpoint's clients trust it (docs/quota.md#trust).
const caFile = "ca.crt"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "startupapicheck" {
		os.Exit(startupAPICheck(os.Args[2:]))
	}
	var o options
	o.bindServerFlags(flag.CommandLine)
	o.bindCertFlags(flag.CommandLine)
	o.bindInjectFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		setupLog.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// bindServerFlags binds the flags of the manager's own servers: metrics,
// probes, webhooks, leader election.
func (o *options) bindServerFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0",
		"Address of the metrics endpoint: :8443 for HTTPS, :8080 for HTTP, 0 to disable.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader among replicas so that one reconciles at a time (webhooks are served by all).")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS with authentication and authorization; false for plain HTTP.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Allow HTTP/2 on the metrics and webhook servers (off: CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&o.metricsCertPath, "metrics-cert-path", "", "Directory with the metrics server certificate; empty: self-signed in memory.")
	fs.StringVar(&o.metricsCertName, "metrics-cert-name", "tls.crt", "Metrics server certificate file name.")
	fs.StringVar(&o.metricsCertKey, "metrics-cert-key", "tls.key", "Metrics server key file name.")
	fs.StringVar(&o.webhookCertPath, "webhook-cert-path", "",
		"Directory with the webhook serving certificate (reloaded when its files change); "+
			"empty: <temp>/k8s-webhook-server/serving-certs.")
	fs.StringVar(&o.webhookCertName, "webhook-cert-name", "tls.crt", "Webhook certificate file name.")
	fs.StringVar(&o.webhookCertKey, "webhook-cert-key", "tls.key", "Webhook key file name.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.quotaLeaseAddr, "quota-lease-bind-address", fmt.Sprintf(":%d", v1alpha1.QuotaLeasePort),
		"Address of the SharedQuota lease endpoint, served over HTTPS with the webhook's certificate by every replica; "+
			"its port is also the port sidecars reach on the webhook Service; 0 to disable (docs/quota.md#trust).")
	fs.StringVar(&o.quotaLeaseService, "quota-lease-service", "retry-operator-webhook-service",
		"Service of --operator-namespace the sidecars reach the lease endpoint through, at <service>.<namespace>.svc "+
			"(a name the webhook certificate carries), dialled at its cluster IP.")
}

// bindCertFlags binds the flags of the self-signed webhook certificate, the
// mode without cert-manager (docs/operations.md, Certificates).
func (o *options) bindCertFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.certSecret, "webhook-cert-secret", "",
		"Without cert-manager: keep a self-signed CA and serving certificate in this Secret of --operator-namespace "+
			"(copied into --webhook-cert-path, which must be writable), renew them at runtime before they expire, and "+
			"keep the CA in the caBundle of the two webhook configurations. All replicas share the Secret "+
			"(docs/operations.md, Certificates).")
	fs.StringVar(&o.certHosts, "webhook-cert-hosts",
		"retry-operator-webhook-service.retry-operator-system.svc,retry-operator-webhook-service.retry-operator-system.svc.cluster.local",
		"Comma-separated DNS names the self-signed serving certificate covers (with --webhook-cert-secret; not IP addresses).")
	fs.StringVar(&o.webhookURLHost, "webhook-url-host", "",
		"With --webhook-cert-secret, for a manager running outside the cluster: create the Secret if it is missing, "+
			"point the webhook configurations at https://<host>:<webhook-port>/<path> instead of the in-cluster Service, "+
			"and name the host first in the certificate. A DNS name the API server resolves to this machine.")
	fs.StringVar(&o.mutatingConfig, "mutating-webhook-configuration", v1alpha1.MutatingWebhookConfigurationName,
		"Name of the MutatingWebhookConfiguration whose caBundle --webhook-cert-secret keeps.")
	fs.StringVar(&o.validatingConfig, "validating-webhook-configuration", v1alpha1.ValidatingWebhookConfigurationName,
		"Name of the ValidatingWebhookConfiguration whose caBundle --webhook-cert-secret keeps.")
}

// bindInjectFlags binds the flags of what is injected and reconciled: the
// sidecar container, the namespaces left alone, the controller's concurrency.
func (o *options) bindInjectFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.operatorNamespace, "operator-namespace", envOr("POD_NAMESPACE", v1alpha1.OperatorNamespace),
		"The manager's own namespace, never injected (default: $POD_NAMESPACE, else retry-operator-system).")
	fs.StringVar(&o.sidecarImage, "sidecar-image", podinject.DefaultImage, "Image of the injected retry-sidecar container.")
	fs.StringVar(&o.sidecarPullPolicy, "sidecar-image-pull-policy", "",
		"imagePullPolicy of the retry-sidecar: Always, IfNotPresent or Never; empty: the API server's default.")
	fs.StringVar(&o.sidecarPullSecrets, "sidecar-image-pull-secrets", "",
		"Comma-separated Secret names added to every injected pod's imagePullSecrets, for a --sidecar-image in a registry that needs "+
			"credentials; each Secret must exist in the pod's namespace.")
	fs.StringVar(&o.sidecarTokenAudience, "sidecar-token-audience", "",
		"Audience of the sidecar's projected service-account token; empty: the API server's own (docs/fleet.md).")
	fs.StringVar(&o.sidecarNoProxy, "sidecar-no-proxy", podinject.DefaultNoProxy,
		"NO_PROXY/no_proxy given to app containers: destinations that bypass the sidecar.")
	def := podinject.DefaultResources()
	fs.StringVar(&o.sidecarCPURequest, "sidecar-cpu-request", quantity(def.Requests, corev1.ResourceCPU),
		"Default CPU request of the sidecar (pod annotation retry.dev/sidecar-cpu-request overrides).")
	fs.StringVar(&o.sidecarMemoryRequest, "sidecar-memory-request", quantity(def.Requests, corev1.ResourceMemory),
		"Default memory request of the sidecar (pod annotation retry.dev/sidecar-memory-request overrides).")
	fs.StringVar(&o.sidecarMemoryLimit, "sidecar-memory-limit", quantity(def.Limits, corev1.ResourceMemory),
		"Default memory limit of the sidecar (pod annotation retry.dev/sidecar-memory-limit overrides); empty: none.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 4, "Namespaces reconciled in parallel.")
	fs.StringVar(&o.sidecarClusterRole, "sidecar-cluster-role", controller.DefaultSidecarClusterRole,
		"ClusterRole bound in every namespace with injected pods so their sidecars can watch retry-policies (docs/fleet.md).")
	fs.StringVar(&o.tracingEndpoint, "tracing-otlp-endpoint", "",
		"OTLP/HTTP base URL of the collector that injected sidecars send their spans to (OTEL_EXPORTER_OTLP_ENDPOINT); "+
			"empty: tracing off (docs/observability.md#tracing).")
	fs.Float64Var(&o.tracingSamplingRatio, "tracing-sampling-ratio", 1,
		"Share of the requests without a sampled parent that injected sidecars trace, 0 to 1; a request whose traceparent "+
			"is sampled is always traced (OTEL_TRACES_SAMPLER parentbased_traceidratio).")
}

// run runs the manager with the API server of cfg until ctx ends.
func run(ctx context.Context, cfg *rest.Config, o options) error {
	webhooksEnabled := os.Getenv("ENABLE_WEBHOOKS") != "false"
	injectCfg, err := o.injectConfig()
	if err != nil {
		return err
	}
	certDir := o.webhookCertPath
	if certDir == "" {
		certDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	if _, err := o.certHostList(); err != nil {
		return err
	}
	if webhooksEnabled && o.webhookURLHost != "" {
		if err := o.prepareLocalRun(ctx, cfg); err != nil {
			return err
		}
	}
	cfg = rest.CopyConfig(cfg)
	// Lists and watches that find the API server away wait for it in the
	// dial, so client-go's informers come back the moment it listens again
	// instead of after their doubling backoff.
	// When one comes back from a restart, the term's manager starts afresh
	// (Terms.Refresh: its informers would list again only after a backoff
	// that grows with every restart).
	var refresh atomic.Pointer[manager.Terms]
	cfg.Dial = manager.PatientDial(&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		250*time.Millisecond, 30*time.Second, func() {
			if t := refresh.Load(); t != nil {
				t.Refresh()
			}
		})
	mgr, err := ctrl.NewManager(cfg, o.managerOptions(certDir))
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	lease, err := o.quotaLease(certDir)
	if err != nil {
		return err
	}
	setup := manager.SetupOptions{
		MaxConcurrentReconciles: o.maxConcurrentReconciles,
		SidecarClusterRole:      o.sidecarClusterRole,
		OperatorNamespace:       o.operatorNamespace,
		Inject:                  injectCfg,
		QuotaLease:              lease,
	}
	terms := o.terms(cfg, setup, webhooksEnabled, certDir)
	if terms.Ready, err = manager.APIServerReady(cfg, 100*time.Millisecond, 30*time.Second); err != nil {
		return err
	}
	refresh.Store(terms)
	if err := mgr.Add(terms); err != nil {
		return err
	}
	if err := mgr.Add(manager.StartLeaseCanary(mgr)); err != nil {
		return err
	}
	// Every replica serves the quota lease endpoint.
	if err := manager.SetupQuotaLease(mgr, setup); err != nil {
		return err
	}
	certsReady, webhookErr, err := o.setupWebhooks(mgr, setup, webhooksEnabled, certDir)
	if err != nil {
		return err
	}
	if err := o.addHealthChecks(mgr, terms, webhooksEnabled, certsReady); err != nil {
		return err
	}
	return start(ctx, mgr, webhookErr)
}

// managerOptions are the manager's options from the flags: its metrics,
// webhook and probe servers and leader election.
func (o options) managerOptions(certDir string) ctrl.Options {
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	webhookServer := manager.DrainingWebhookServer(webhook.NewServer(webhook.Options{
		Port: o.webhookPort, TLSOpts: tlsOpts,
		CertDir: certDir, CertName: o.webhookCertName, KeyName: o.webhookCertKey,
	}), manager.WebhookDrain)
	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics, TLSOpts: tlsOpts}
	if o.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	if o.metricsCertPath != "" {
		metricsOpts.CertDir, metricsOpts.CertName, metricsOpts.KeyName = o.metricsCertPath, o.metricsCertName, o.metricsCertKey
	}
	opts := manager.Options(ctrl.Options{
		Metrics:                metricsOpts,
		WebhookServer:          webhookServer,
		HealthProbeBindAddress: o.probeAddr,
		// The replica's manager runs what every replica runs (webhooks, the
		// certificate copy, probes, metrics); the leader's work runs in terms
		// (manager.Terms), which hold the election themselves.
		LeaderElection: false,
	})
	manager.WithLeaseCanary(&opts.Cache, o.lease())
	return opts
}

// lease is the leader election's Lease.
func (o options) lease() types.NamespacedName {
	return types.NamespacedName{Namespace: o.operatorNamespace, Name: manager.LeaderElectionID}
}

// terms is the leader's work: in each term of office a manager of its own
// with the reconcilers and, in self-signed mode, the certificate rotator.
// Without --leader-elect one term runs for the life of the process.
func (o options) terms(cfg *rest.Config, setup manager.SetupOptions, webhooksEnabled bool, certDir string) *manager.Terms {
	var term atomic.Int64
	return &manager.Terms{
		Config: cfg, Namespace: o.operatorNamespace, Name: manager.LeaderElectionID, Alone: !o.leaderElect,
		Log: ctrl.Log.WithName("terms"),
		NewTerm: func() (ctrl.Manager, error) {
			opts := manager.Options(ctrl.Options{
				Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
				// A term's controllers carry the names of the last term's.
				Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
			})
			manager.WithLeaseCanary(&opts.Cache, o.lease())
			tm, err := ctrl.NewManager(cfg, opts)
			if err != nil {
				return nil, err
			}
			if err := tm.Add(manager.StartLeaseCanary(tm)); err != nil {
				return nil, err
			}
			if _, err := manager.SetupControllers(tm, setup); err != nil {
				return nil, err
			}
			if webhooksEnabled && o.certSecret != "" {
				// cert-controller builds its controller unmanaged, outside the
				// term manager's SkipNameValidation, and controller-runtime
				// refuses a name used before in the process: a second term in
				// the same process failed to start, for good.
				if err := o.addRotator(tm, certDir, fmt.Sprintf("cert-rotator-term-%d", term.Add(1))); err != nil {
					return nil, err
				}
				if err := o.addRepairWitness(tm); err != nil {
					return nil, err
				}
			}
			return tm, nil
		},
	}
}

// setupWebhooks registers the webhooks, at once or, with
// --webhook-cert-secret, once the certificate is ready. certsReady closes when
// it is; webhookErr receives an error of a late registration.
func (o options) setupWebhooks(mgr ctrl.Manager, setup manager.SetupOptions, enabled bool, certDir string) (certsReady chan struct{}, webhookErr chan error, err error) {
	// With --webhook-cert-secret the webhook server starts once the rotator has
	// the certificate on disk and the CA in the caBundles: controller-runtime's
	// server cannot start without its files. Until then the replica is not ready.
	certsReady = make(chan struct{})
	if enabled && o.certSecret != "" {
		if err := o.addCertCopy(mgr, certDir, certsReady); err != nil {
			return nil, nil, err
		}
	} else {
		close(certsReady)
	}
	register := func() error {
		if err := manager.SetupWebhooks(mgr, setup); err != nil {
			return err
		}
		setupLog.Info("webhooks enabled", "sidecarImage", setup.Inject.Image, "excludedNamespaces", setup.Inject.ExcludedNamespaces)
		return nil
	}
	webhookErr = make(chan error, 1)
	switch {
	case !enabled:
		setupLog.Info("webhooks disabled by ENABLE_WEBHOOKS=false; the controller still validates every policy")
	case o.certSecret == "":
		if err := register(); err != nil {
			return nil, nil, err
		}
	default:
		go func() {
			<-certsReady
			setupLog.Info("webhook certificate ready", "secret", o.operatorNamespace+"/"+o.certSecret, "dir", certDir)
			if err := register(); err != nil {
				webhookErr <- err
			}
		}()
	}
	return certsReady, webhookErr, nil
}

// addHealthChecks adds /healthz and /readyz. /healthz fails while the
// replica's watches, or its term's, stay broken (manager.WatchHealth): the
// kubelet restarts it. With webhooks the replica is
// not ready until the webhook server serves a certificate that chains to the
// CA bundle of every webhook (certready): the Service must not send admission
// requests to a replica that would fail them.
func (o options) addHealthChecks(mgr ctrl.Manager, terms *manager.Terms, webhooksEnabled bool, certsReady <-chan struct{}) error {
	watches := &manager.WatchHealth{Direct: mgr.GetAPIReader(), Lease: o.lease(), Caches: func() []client.Reader {
		caches := []client.Reader{mgr.GetCache()}
		if term := terms.Current(); term != nil {
			caches = append(caches, term.GetCache())
		}
		return caches
	}}
	if err := mgr.AddHealthzCheck("healthz", watches.Check); err != nil {
		return err
	}
	ready := healthz.Ping
	if webhooksEnabled {
		trusted := &certready.Checker{Reader: mgr.GetAPIReader(), Mutating: o.mutatingConfig, Validating: o.validatingConfig,
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.webhookPort))}
		ready = func(req *http.Request) error {
			select {
			case <-certsReady:
			default:
				return fmt.Errorf("webhook certificate not ready yet (Secret %s/%s)", o.operatorNamespace, o.certSecret)
			}
			if err := mgr.GetWebhookServer().StartedChecker()(req); err != nil {
				return err
			}
			return trusted.Check(req)
		}
	}
	return mgr.AddReadyzCheck("readyz", ready)
}

// start runs the manager until ctx ends (a signal), or until a late webhook
// registration fails (its error is returned).
func start(ctx context.Context, mgr ctrl.Manager, webhookErr chan error) error {
	setupLog.Info("starting manager")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case err := <-webhookErr:
			setupLog.Error(err, "webhooks could not be set up; stopping")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	select {
	case err := <-webhookErr:
		return err
	default:
		return nil
	}
}

// addCertRotator adds both halves of the self-signed mode to one manager
// (electing its leader itself): the copy on every replica and the rotator
// on the leader.
func (o options) addCertRotator(mgr ctrl.Manager, certDir, name string, ready chan struct{}) error {
	if err := o.addCertCopy(mgr, certDir, ready); err != nil {
		return err
	}
	return o.addRotator(mgr, certDir, name)
}

// addCertCopy copies the certificate of Secret --webhook-cert-secret into
// certDir on every replica (certsync: as the watch delivers each change,
// instead of the kubelet's projection delay), where controller-runtime's
// certificate watcher picks up each renewal without a restart; ready closes
// once the files are there.
func (o options) addCertCopy(mgr ctrl.Manager, certDir string, ready chan struct{}) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	return mgr.Add(&certsync.Writer{
		Reader: mgr.GetAPIReader(), Watch: cs, Secret: types.NamespacedName{Namespace: o.operatorNamespace, Name: o.certSecret},
		Dir: certDir, CertName: o.webhookCertName, KeyName: o.webhookCertKey, CAName: caFile,
		// Each change is copied as the watch delivers it; the read every
		// 10 s is the backstop of a watch that fell behind.
		Interval: 10 * time.Second,
		Written:  ready,
	})
}

// addRotator keeps the webhook certificate in Secret --webhook-cert-secret
// with OPA's cert-controller, as a leader-only runnable of mgr (in a term's
// manager it runs for the term): it writes a CA and a serving certificate
// into the empty Secret, renews them, and keeps the CA in the caBundles.
//
// name is the rotator's controller name, unique per process; "" is the
// library's default.
func (o options) addRotator(mgr ctrl.Manager, certDir, name string) error {
	hosts, err := o.certHostList()
	if err != nil {
		return err
	}
	return rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.operatorNamespace, Name: o.certSecret},
		CertDir:        certDir,
		CertName:       o.webhookCertName,
		KeyName:        o.webhookCertKey,
		CAName:         "retry-operator-webhook-ca",
		CAOrganization: "retry-operator",
		DNSName:        hosts[0],
		ExtraDNSNames:  hosts[1:],
		// Readiness comes from certsync on every replica; the rotator runs on
		// the leader alone and signals nothing the replica waits for.
		IsReady:        make(chan struct{}),
		ControllerName: name,
		Webhooks: []rotator.WebhookInfo{
			{Name: o.mutatingConfig, Type: rotator.Mutating},
			{Name: o.validatingConfig, Type: rotator.Validating},
		},
		FieldOwner: "retry-operator",
		// One writer: two replicas that each wrote the Secret and the CA
		// bundles raced ("the object has been modified", "missing ca.crt"),
		// and one could serve a certificate whose CA the bundles no longer
		// held. The leader writes; every replica copies (certsync).
		RequireLeaderElection: true,
		// A one-year serving certificate renewed 30 days before it ends, checked
		// hourly; the CA lives ten years (the library's default).
		ServerCertDuration:     365 * 24 * time.Hour,
		LookaheadInterval:      30 * 24 * time.Hour,
		RotationCheckFrequency: time.Hour,
	})
}

// addRepairWitness records an event on the certificate Secret or a webhook
// configuration that the rotator repaired (certrepair): it runs beside the
// rotator, in the leader's term.
func (o options) addRepairWitness(mgr ctrl.Manager) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	return mgr.Add(&certrepair.Witness{
		Watch: cs, Recorder: mgr.GetEventRecorder("retry-operator-cert-repair"),
		Secret: types.NamespacedName{Namespace: o.operatorNamespace, Name: o.certSecret},
		CAKey:  caFile, CertKey: o.webhookCertName,
		Mutating: o.mutatingConfig, Validating: o.validatingConfig,
	})
}

// quotaLease is where the replica serves the quota lease endpoint and what
// the rendered quotas tell the sidecars: https://<service>.<namespace>.svc:<port>,
// dialled at the Service's cluster IP, which the kubelet gives every pod of the
// Service's namespace as <SERVICE>_SERVICE_HOST (so leasing needs no cluster
// DNS); with --webhook-url-host (a manager outside the cluster),
// https://<that host>:<port>.
func (o options) quotaLease(certDir string) (manager.QuotaLease, error) {
	ep := controller.LeaseEndpoint{CAFile: filepath.Join(certDir, caFile)}
	if o.quotaLeaseAddr == "0" {
		return manager.QuotaLease{Endpoint: ep}, nil
	}
	_, port, err := net.SplitHostPort(o.quotaLeaseAddr)
	if err != nil || port == "" {
		return manager.QuotaLease{}, fmt.Errorf("--quota-lease-bind-address: %q is not host:port or :port, such as :9445", o.quotaLeaseAddr)
	}
	if errs := validation.IsDNS1035Label(o.quotaLeaseService); len(errs) > 0 {
		return manager.QuotaLease{}, fmt.Errorf("--quota-lease-service: %q is not a Service name: %s", o.quotaLeaseService, strings.Join(errs, "; "))
	}
	host := o.quotaLeaseService + "." + o.operatorNamespace + ".svc"
	switch env := strings.ToUpper(strings.ReplaceAll(o.quotaLeaseService, "-", "_")) + "_SERVICE_HOST"; {
	case o.webhookURLHost != "":
		host = o.webhookURLHost
	case os.Getenv(env) != "":
		ep.Address = net.JoinHostPort(os.Getenv(env), port)
	}
	ep.URL = "https://" + net.JoinHostPort(host, port)
	return manager.QuotaLease{Endpoint: ep, Addr: o.quotaLeaseAddr,
		CertFile: filepath.Join(certDir, o.webhookCertName), KeyFile: filepath.Join(certDir, o.webhookCertKey)}, nil
}

// checkOTLPEndpoint accepts an empty endpoint (tracing off) or an http or
// https URL with a host.
func checkOTLPEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--tracing-otlp-endpoint: %q is not an http:// or https:// URL with a host, such as http://otel-collector.observability.svc:4318", endpoint)
	}
	return nil
}

func (o options) injectConfig() (podinject.Config, error) {
	cfg := podinject.Config{
		Image:              o.sidecarImage,
		ImagePullPolicy:    corev1.PullPolicy(o.sidecarPullPolicy),
		NoProxy:            o.sidecarNoProxy,
		TokenAudience:      o.sidecarTokenAudience,
		ExcludedNamespaces: v1alpha1.ExcludedNamespaces(o.operatorNamespace),
		Resources:          corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
	}
	if r := o.tracingSamplingRatio; !(r >= 0 && r <= 1) {
		return cfg, fmt.Errorf("--tracing-sampling-ratio: %v is not a number from 0 to 1", r)
	}
	cfg.Tracing = podinject.Tracing{OTLPEndpoint: o.tracingEndpoint, SamplingRatio: o.tracingSamplingRatio}
	if err := checkOTLPEndpoint(o.tracingEndpoint); err != nil {
		return cfg, err
	}
	switch cfg.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return cfg, fmt.Errorf("--sidecar-image-pull-policy: %q is not one of Always, IfNotPresent, Never", o.sidecarPullPolicy)
	}
	if o.sidecarImage == "" {
		return cfg, fmt.Errorf("--sidecar-image: must not be empty")
	}
	for name := range strings.SplitSeq(o.sidecarPullSecrets, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return cfg, fmt.Errorf("--sidecar-image-pull-secrets: %q is not a Secret name: %s", name, strings.Join(errs, "; "))
		}
		cfg.ImagePullSecrets = append(cfg.ImagePullSecrets, name)
	}
	for _, q := range []struct {
		flag, value string
		list        corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"--sidecar-cpu-request", o.sidecarCPURequest, cfg.Resources.Requests, corev1.ResourceCPU},
		{"--sidecar-memory-request", o.sidecarMemoryRequest, cfg.Resources.Requests, corev1.ResourceMemory},
		{"--sidecar-memory-limit", o.sidecarMemoryLimit, cfg.Resources.Limits, corev1.ResourceMemory},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return cfg, fmt.Errorf("%s: %q is not a quantity such as 50m, 32Mi or 1", q.flag, q.value)
		}
		q.list[q.name] = v
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	if q, ok := l[name]; ok {
		return q.String()
	}
	return ""
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
