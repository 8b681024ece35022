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
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestReplicasShareOneRotatedCertificate runs the self-signed mode of two
// manager replicas electing a leader against a real API server: the Secret is
// filled once, both replicas agree on it, the CA reaches both webhook
// configurations' caBundle, and the serving certificate names the webhook
// Service.
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
	dirs := startCertRotatingReplicas(t, cfg, o, 2)

	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	first := s.ResourceVersion
	cert := assertServingCertificateForAYear(t, &s)
	eventuallyWebhooksTrustCA(t, c, o, s.Data["ca.crt"])

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

// startCertRotatingReplicas starts n managers that elect a leader in
// o.operatorNamespace, each with its cert rotator writing into a directory
// of its own, and waits until each has a certificate. It returns the
// directories, by replica; the managers stop when the test ends.
func startCertRotatingReplicas(t *testing.T, cfg *rest.Config, o options, n int) (dirs []string) {
	t.Helper()
	var readies []chan struct{}
	for i := range n {
		mgr, err := ctrl.NewManager(cfg, electing(o.operatorNamespace, fmt.Sprintf("replica-%d", i)))
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
		mctx, cancel := context.WithCancel(context.Background())
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
	return dirs
}

// assertServingCertificateForAYear checks that the Secret holds a CA and a
// serving certificate for the webhook Service's names, valid for about a
// year, and returns the certificate.
func assertServingCertificateForAYear(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(s.Data[k]) == 0 {
			t.Errorf("Secret %s has no %s", s.Name, k)
		}
	}
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
	return cert
}

// eventuallyWebhooksTrustCA waits up to 30 s each until every webhook of
// o's mutating and validating configurations has ca as its caBundle.
func eventuallyWebhooksTrustCA(t *testing.T, c client.Client, o options, ca []byte) {
	t.Helper()
	ctx := context.Background()
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
				if !bytes.Equal(b, ca) {
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
}

// electing are a replica's manager options with leader election on, as
// --leader-elect runs it, with short terms for a test.
func electing(ns, id string) ctrl.Options {
	return ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "retry-operator-test",
		LeaseDuration: ptr.To(4 * time.Second), RenewDeadline: ptr.To(3 * time.Second), RetryPeriod: ptr.To(500 * time.Millisecond),
		LeaderElectionReleaseOnCancel: true}
}

// TestOnlyTheLeaderWritesTheCertificate: a replica that is not the leader
// never writes the Secret or the CA bundles, and still serves what the leader
// wrote as soon as it is there. Two replicas that both wrote raced ("the
// object has been modified", "missing ca.crt") and one could serve a
// certificate the CA bundles no longer trusted.
func TestOnlyTheLeaderWritesTheCertificate(t *testing.T) {
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg, c := startAPI(t, env)
	ctx := context.Background()
	const ns, secret = "retry-operator-system", "webhook-server-cert"
	// Another replica holds the lease (and keeps it for the whole test).
	now := metav1.NewMicroTime(time.Now())
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "retry-operator-test"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("the-leader"), LeaseDurationSeconds: ptr.To[int32](3600),
				AcquireTime: &now, RenewTime: &now}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	o := options{
		operatorNamespace: ns, certSecret: secret, webhookCertName: "tls.crt", webhookCertKey: "tls.key",
		certHosts:      "retry-operator-webhook-service.retry-operator-system.svc",
		mutatingConfig: "mutating-webhook-configuration", validatingConfig: "validating-webhook-configuration",
	}
	mgr, err := ctrl.NewManager(cfg, electing(ns, "follower"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	written := make(chan struct{})
	if err := o.addCertRotator(mgr, dir, "cert-rotator-follower", written); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })

	time.Sleep(3 * time.Second) // what a writing follower needed to fill the Secret (about 1 s)
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data) != 0 {
		t.Fatalf("the follower wrote the Secret (keys %v); only the leader may", keys(s.Data))
	}
	select {
	case <-written:
		t.Fatal("the follower reported a certificate before any was written")
	default:
	}

	// The leader fills the Secret: the follower copies it at once.
	s.Data = map[string][]byte{"tls.crt": []byte("leader's certificate"), "tls.key": []byte("leader's key"), "ca.crt": []byte("leader's CA")}
	filled := time.Now()
	if err := c.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	select {
	case <-written:
	case <-time.After(5 * time.Second):
		t.Fatal("the follower did not copy the leader's certificate within 5 s")
	}
	took := time.Since(filled)
	if b, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); string(b) != "leader's certificate" {
		t.Errorf("the follower's tls.crt = %q, want the leader's", b)
	}
	if took > time.Second {
		t.Errorf("copied %s after the leader wrote; want within a second (the watch, not the 10 s read)", took.Round(time.Millisecond))
	}
	t.Logf("the follower wrote nothing and copied the leader's certificate %s after it was written", took.Round(time.Millisecond))
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestASecondTermInTheSameProcessBuildsItsRotator: a replica that lost the
// lease (its network cut for 10 s) and won it back runs a second term in the
// same process. Its rotator carried the first term's controller name, which
// controller-runtime refuses once used, and the term failed to build again
// every second, for good: no reconciler, no rotator (found by make
// test-chaos).
func TestASecondTermInTheSameProcessBuildsItsRotator(t *testing.T) {
	cfg, _ := startAPI(t, &envtest.Environment{})
	o := options{
		operatorNamespace: "retry-operator-system", certSecret: "webhook-server-cert", webhookCertName: "tls.crt", webhookCertKey: "tls.key",
		certHosts:      "retry-operator-webhook-service.retry-operator-system.svc",
		mutatingConfig: "mutating-webhook-configuration", validatingConfig: "validating-webhook-configuration",
	}
	terms := o.terms(cfg, manager.SetupOptions{OperatorNamespace: o.operatorNamespace}, true, t.TempDir())
	for term := 1; term <= 2; term++ {
		if _, err := terms.NewTerm(); err != nil {
			t.Fatalf("term %d: %v", term, err)
		}
	}
}
