package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/manifests"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
	webhookv1alpha1 "github.com/retrydev/retry-operator/internal/webhook/v1alpha1"
)

// TestCertHostList: the names of the self-signed certificate, --webhook-url-host
// first; an IP address is refused, since cert-controller writes DNS names only.
func TestCertHostList(t *testing.T) {
	tests := map[string]struct {
		secret, hosts, urlHost string
		want                   []string
		wantErr                string
	}{
		"without a Secret there is no self-signed certificate": {hosts: "a.svc", want: nil},
		"the in-cluster names are kept in order": {
			secret: "cert", hosts: "svc.ns.svc, svc.ns.svc.cluster.local", want: []string{"svc.ns.svc", "svc.ns.svc.cluster.local"}},
		"the URL host comes first, once": {
			secret: "cert", hosts: "svc.ns.svc,localhost", urlHost: "localhost", want: []string{"localhost", "svc.ns.svc"}},
		"a URL host without a Secret is refused": {
			urlHost: "localhost", wantErr: "--webhook-url-host: needs --webhook-cert-secret"},
		"an IP address is refused": {
			secret: "cert", hosts: "svc.ns.svc", urlHost: "192.0.2.7", wantErr: `--webhook-cert-hosts, --webhook-url-host: "192.0.2.7" is an IP address`},
		"a name with a space is refused": {
			secret: "cert", hosts: "my host", wantErr: `--webhook-cert-hosts, --webhook-url-host: "my host" is not a DNS name`},
		"no name at all is refused": {
			secret: "cert", hosts: " , ", wantErr: "--webhook-cert-hosts: at least one DNS name is required"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := options{certSecret: tc.secret, certHosts: tc.hosts, webhookURLHost: tc.urlHost}.certHostList()
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("certHostList() error = %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("certHostList() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCertControllerWritesAnIPAsADNSName is why certHostList refuses IP
// addresses: a certificate cert-controller makes for 127.0.0.1 does not
// verify for 127.0.0.1. Should a later cert-controller write IP addresses,
// this fails, and IP hosts can be allowed.
func TestCertControllerWritesAnIPAsADNSName(t *testing.T) {
	cr := &rotator.CertRotator{CAName: "ca", CAOrganization: "test", DNSName: "127.0.0.1",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.IPAddresses) != 0 || !slices.Equal(cert.DNSNames, []string{"127.0.0.1"}) {
		t.Fatalf("certificate names DNS %q, IP %v; want DNS [127.0.0.1] only", cert.DNSNames, cert.IPAddresses)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err == nil {
		t.Fatal("the certificate verifies for 127.0.0.1; IP hosts could be allowed")
	}
}

// TestLocalRunServesTheCertificateItWrites starts the manager as a developer
// runs it outside the cluster (--webhook-cert-secret, --webhook-url-host)
// against a real API server with the webhook configurations as installed: it
// creates the Secret, points the configurations at itself, serves a
// certificate signed by the CA it writes into the Secret and both caBundles,
// and the API server calls both webhooks through it.
func TestLocalRunServesTheCertificateItWrites(t *testing.T) {
	cfg, c := startAPI(t, nil)
	ctx := context.Background()
	const ns, secret = "retry-operator-system", "retry-operator-webhook-local-cert"
	installWebhookConfigurations(t, c)
	for _, name := range []string{ns, "shop"} {
		labels := map[string]string{v1alpha1.LabelNamespaceInjection: v1alpha1.NamespaceInjectionEnabled}
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	port := startLocalRunUntilReady(t, cfg, secret)

	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		t.Fatalf("the manager did not create its Secret: %v", err)
	}
	ca := s.Data["ca.crt"]
	assertWebhooksCallLocalhost(t, c, port, ca)
	assertServesACertificateSignedBy(t, port, secret, ca)

	// The API server trusts it: the validating webhook (failurePolicy Fail)
	// admits a policy, and the pod webhook injects the sidecar.
	p := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "payments"},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "payments", Hosts: []string{"payments.shop.svc"}}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("creating a RetryPolicy through the validating webhook: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != "retry-sidecar" {
		t.Errorf("pod created with init containers %v, want retry-sidecar first: the pod webhook was not called", pod.Spec.InitContainers)
	}
}

// startLocalRunUntilReady runs the manager as a local run (webhooks called
// at localhost, its certificate in Secret secret) until the test ends, and
// waits until it is ready. It returns the webhook server's port.
func startLocalRunUntilReady(t *testing.T, cfg *rest.Config, secret string) (port int) {
	t.Helper()
	port, probe := freePort(t), freePort(t)
	o := parseFlags(t,
		"--webhook-cert-secret="+secret, "--webhook-url-host=localhost", "--webhook-cert-path="+t.TempDir(),
		fmt.Sprintf("--webhook-port=%d", port), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		"--mutating-webhook-configuration=mutating-webhook-configuration",
		"--validating-webhook-configuration=validating-webhook-configuration")
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(mctx, cfg, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	// cert-controller's first certificate takes a few seconds.
	polltest.Until(t, 90*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("manager stopped before it was ready: %v", err)
		default:
		}
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
	})
	return port
}

// assertWebhooksCallLocalhost checks that every webhook is installed to
// call its path at localhost:port, trusting ca.
func assertWebhooksCallLocalhost(t *testing.T, c client.Client, port int, ca []byte) {
	t.Helper()
	wantURLs := map[string]string{
		v1alpha1.InjectWebhookName:         fmt.Sprintf("https://localhost:%d/mutate--v1-pod", port),
		v1alpha1.PodOptInInjectWebhookName: fmt.Sprintf("https://localhost:%d/mutate--v1-pod", port),
		v1alpha1.ValidateWebhookName:       fmt.Sprintf("https://localhost:%d/validate-policy-retry-dev-v1alpha1-retrypolicy", port),
		v1alpha1.ValidateQuotaWebhookName:  fmt.Sprintf("https://localhost:%d%s", port, webhookv1alpha1.QuotaPath),
		v1alpha1.GuardWebhookName:          fmt.Sprintf("https://localhost:%d%s", port, podinject.GuardPath),
	}
	configs := clientConfigs(t, c)
	if len(configs) != len(wantURLs) {
		t.Errorf("%d webhooks installed, want %d", len(configs), len(wantURLs))
	}
	for name, cc := range configs {
		if want := wantURLs[name]; cc.URL == nil || *cc.URL != want || cc.Service != nil {
			t.Errorf("webhook %s calls %v (service %v), want %s", name, cc.URL, cc.Service, want)
		}
		if !bytes.Equal(cc.CABundle, ca) {
			t.Errorf("webhook %s: caBundle is not the Secret's ca.crt", name)
		}
	}
}

// assertServesACertificateSignedBy checks that the webhook server at
// localhost:port serves a certificate that ca (from Secret secret) verifies,
// for localhost and the webhook Service's names.
func assertServesACertificateSignedBy(t *testing.T, port int, secret string, ca []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("Secret %s has no CA: %q", secret, ca)
	}
	conn, err := tls.Dial("tcp", fmt.Sprintf("localhost:%d", port), &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("the webhook server's certificate does not verify with the CA it wrote: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if want := []string{"localhost", "retry-operator-webhook-service.retry-operator-system.svc",
		"retry-operator-webhook-service.retry-operator-system.svc.cluster.local"}; !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("serving certificate names %q, want %q", leaf.DNSNames, want)
	}
}

// installWebhookConfigurations creates config/webhook/manifests.yaml as
// kustomize leaves it for the cluster: webhooks calling a Service, no caBundle.
func installWebhookConfigurations(t *testing.T, c client.Client) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// clientConfigs is every webhook's clientConfig by webhook name.
func clientConfigs(t *testing.T, c client.Client) map[string]admissionv1.WebhookClientConfig {
	t.Helper()
	ctx := context.Background()
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, types.NamespacedName{Name: "mutating-webhook-configuration"}, &m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "validating-webhook-configuration"}, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]admissionv1.WebhookClientConfig{}
	for _, w := range m.Webhooks {
		out[w.Name] = w.ClientConfig
	}
	for _, w := range v.Webhooks {
		out[w.Name] = w.ClientConfig
	}
	return out
}

func parseFlags(t *testing.T, args ...string) options {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o.bindServerFlags(fs)
	o.bindCertFlags(fs)
	o.bindInjectFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

// startAPI starts an API server with the project's CRDs (and env's options)
// and returns a client of it with the manager's scheme. The manager's logs go
// to stderr with TEST_LOG set.
func startAPI(t *testing.T, env *envtest.Environment) (*rest.Config, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	logs := io.Discard
	if os.Getenv("TEST_LOG") != "" {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs)))
	cfg := testenv.Start(t, env)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

func httpOK(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
