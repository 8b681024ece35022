package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retrydev/retry-operator/internal/polltest"
	"github.com/retrydev/retry-operator/internal/testenv"
)

// TestReplicasShareOneRotatedCertificate runs the self-signed mode of two
// manager replicas against a real API server: the Secret is filled once, both
// replicas agree on it, the CA reaches both webhook configurations' caBundle,
// and the serving certificate names the webhook Service.
func TestReplicasShareOneRotatedCertificate(t *testing.T) {
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg, c := startAPI(t, env)
	ctx := context.Background()
	const ns, secret = "retry-operator-system", "webhook-server-cert"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}}, // as config/selfsigned ships it
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	o := options{
		operatorNamespace: ns, certSecret: secret, webhookCertName: "tls.crt", webhookCertKey: "tls.key",
		certHosts:      "retry-operator-webhook-service.retry-operator-system.svc,retry-operator-webhook-service.retry-operator-system.svc.cluster.local",
		mutatingConfig: "mutating-webhook-configuration", validatingConfig: "validating-webhook-configuration",
	}
	var (
		readies []chan struct{}
		dirs    []string
	)
	for i := range 2 {
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		dirs = append(dirs, dir)
		ready := make(chan struct{})
		if err := o.addCertRotator(mgr, dir, fmt.Sprintf("cert-rotator-%d", i), ready); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		readies = append(readies, ready)
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		})
	}
	for i, r := range readies {
		select {
		case <-r:
		case <-time.After(90 * time.Second):
			t.Fatalf("replica %d: certificate not ready after 90s", i)
		}
	}

	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(s.Data[k]) == 0 {
			t.Errorf("Secret %s has no %s", secret, k)
		}
	}
	first := s.ResourceVersion
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"retry-operator-webhook-service.retry-operator-system.svc", "retry-operator-webhook-service.retry-operator-system.svc.cluster.local"}; !slices.Equal(cert.DNSNames, want) {
		t.Errorf("serving certificate names %q, want %q", cert.DNSNames, want)
	}
	if left := time.Until(cert.NotAfter); left < 360*24*time.Hour || left > 366*24*time.Hour {
		t.Errorf("serving certificate valid for %s more, want about a year", left.Round(time.Hour))
	}

	eventuallyCA := func(get func() ([][]byte, error), what string) {
		t.Helper()
		polltest.Until(t, 30*time.Second, func() error {
			bundles, err := get()
			if err != nil {
				return err
			}
			if len(bundles) == 0 {
				return fmt.Errorf("%s: no webhooks", what)
			}
			for _, b := range bundles {
				if !bytes.Equal(b, s.Data["ca.crt"]) {
					return fmt.Errorf("%s: caBundle is not the Secret's ca.crt", what)
				}
			}
			return nil
		})
	}
	eventuallyCA(func() ([][]byte, error) {
		var m admissionv1.MutatingWebhookConfiguration
		err := c.Get(ctx, types.NamespacedName{Name: o.mutatingConfig}, &m)
		var out [][]byte
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out, err
	}, "mutating webhooks")
	eventuallyCA(func() ([][]byte, error) {
		var v admissionv1.ValidatingWebhookConfiguration
		err := c.Get(ctx, types.NamespacedName{Name: o.validatingConfig}, &v)
		var out [][]byte
		for _, w := range v.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out, err
	}, "validating webhooks")

	// Each replica copied the certificate into its own directory.
	for i, dir := range dirs {
		for _, k := range []string{"tls.crt", "tls.key"} {
			b, err := os.ReadFile(filepath.Join(dir, k))
			if err != nil || !bytes.Equal(b, s.Data[k]) {
				t.Errorf("replica %d: %s is not the Secret's (err %v)", i, k, err)
			}
		}
	}

	// Both replicas are up and agree: nobody rewrites the valid certificate.
	time.Sleep(2 * time.Second)
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion != first {
		t.Errorf("Secret rewritten after both replicas were ready: resourceVersion %s -> %s", first, s.ResourceVersion)
	}
	t.Logf("one certificate (serial %s) shared by 2 replicas, its CA in both webhook configurations", cert.SerialNumber)
}
