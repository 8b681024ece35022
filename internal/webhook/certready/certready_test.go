package certready

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

const svcName = "retry-operator-webhook-service.retry-operator-system.svc"

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, cn string) ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serving issues a serving certificate for names, valid until notAfter.
func (c ca) serving(t *testing.T, notAfter time.Time, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func TestVerify(t *testing.T) {
	current, other := newCA(t, "current"), newCA(t, "other")
	good := current.serving(t, time.Now().Add(time.Hour), svcName).Leaf
	pool := func(pems ...[]byte) *x509.CertPool {
		p := x509.NewCertPool()
		for _, b := range pems {
			p.AppendCertsFromPEM(b)
		}
		return p
	}
	tests := map[string]struct {
		leaf    *x509.Certificate
		bundles []bundle
		want    string // "" = ready
	}{
		"a certificate signed by the CA in every bundle, for the Service's name, is ready": {
			leaf:    good,
			bundles: []bundle{{"mutate.pod", svcName, pool(current.pem)}, {"validate.rp", svcName, pool(current.pem)}},
		},
		"a bundle holding the old and the new CA during a rotation is ready": {
			leaf:    good,
			bundles: []bundle{{"validate.rp", svcName, pool(other.pem, current.pem)}},
		},
		"an empty bundle (not injected yet, or emptied by hand) is not ready": {
			leaf:    good,
			bundles: []bundle{{"mutate.pod", svcName, pool(current.pem)}, {"validate.rp", svcName, nil}},
			want:    "webhook validate.rp: no CA bundle yet",
		},
		"a bundle of another CA (a Secret rewritten by another replica) is not ready": {
			leaf:    good,
			bundles: []bundle{{"validate.rp", svcName, pool(other.pem)}},
			want:    "webhook validate.rp: the served certificate does not verify against its CA bundle for " + svcName + ": x509: certificate signed by unknown authority",
		},
		"a certificate for another name is not ready": {
			leaf:    current.serving(t, time.Now().Add(time.Hour), "other.svc").Leaf,
			bundles: []bundle{{"validate.rp", svcName, pool(current.pem)}},
			want:    "webhook validate.rp: the served certificate does not verify against its CA bundle for " + svcName + ": x509: certificate is valid for other.svc, not " + svcName,
		},
		"an expired certificate is not ready": {
			leaf:    current.serving(t, time.Now().Add(-time.Minute), svcName).Leaf,
			bundles: []bundle{{"validate.rp", svcName, pool(current.pem)}},
			want:    "webhook validate.rp: the served certificate does not verify against its CA bundle for " + svcName + ": x509: certificate has expired or is not yet valid",
		},
		"no webhooks at all is not ready": {
			leaf: good,
			want: "the webhook configurations have no webhooks",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := verify(tc.leaf, x509.NewCertPool(), tc.bundles, time.Now())
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
				t.Errorf("verify = %q, want %q", got, tc.want)
			}
		})
	}
}

// Against a real API server: the check follows the CA bundles of the two
// webhook configurations as they change, and keeps the last bundles it read
// while the API server cannot be read.
func TestCheckFollowsTheWebhookConfigurations(t *testing.T) {
	cfg := testenv.Start(t, nil)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	current, other := newCA(t, "current"), newCA(t, "other")
	addr := serveTLS(t, current.serving(t, time.Now().Add(time.Hour), svcName))
	ctx := context.Background()
	svc := &admissionv1.ServiceReference{Namespace: "retry-operator-system", Name: "retry-operator-webhook-service", Path: ptr.To("/x")}
	none := ptr.To(admissionv1.SideEffectClassNone)
	m := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Webhooks: []admissionv1.MutatingWebhook{{
		Name: "mutate.pod.retry.dev", ClientConfig: admissionv1.WebhookClientConfig{Service: svc, CABundle: current.pem},
		SideEffects: none, AdmissionReviewVersions: []string{"v1"}}}}
	v := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"}, Webhooks: []admissionv1.ValidatingWebhook{{
		Name: "validate.retrypolicy.retry.dev", ClientConfig: admissionv1.WebhookClientConfig{Service: svc},
		SideEffects: none, AdmissionReviewVersions: []string{"v1"}}}}
	for _, o := range []client.Object{m, v} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	reader, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	check := &Checker{Reader: reader, Mutating: "m", Validating: "v", Addr: addr}
	steps := []struct {
		name   string
		bundle []byte
		want   string
	}{
		{"the validating bundle not injected yet", nil, "webhook validate.retrypolicy.retry.dev: no CA bundle yet"},
		{"the validating bundle injected", current.pem, ""},
		{"the validating bundle replaced by another CA's", other.pem, "webhook validate.retrypolicy.retry.dev: the served certificate does not verify"},
		{"the validating bundle restored", current.pem, ""},
	}
	for _, s := range steps {
		v.Webhooks[0].ClientConfig.CABundle = s.bundle
		if err := c.Update(ctx, v); err != nil {
			t.Fatal(err)
		}
		err := check.Check(nil)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if s.want == "" && got != "" || s.want != "" && !strings.HasPrefix(got, s.want) {
			t.Errorf("%s: Check = %q, want %q", s.name, got, s.want)
		}
	}
	check.Reader = unreachable(t, scheme)
	if err := check.Check(nil); err != nil {
		t.Errorf("with the API server unreachable, Check = %v, want the last bundles read (ready)", err)
	}
	if err := (&Checker{Reader: check.Reader, Mutating: "m", Validating: "v", Addr: addr}).Check(nil); err == nil {
		t.Error("a checker that never read the bundles is ready with the API server unreachable")
	}
}

// unreachable is a client of an API server address nothing listens on.
func unreachable(t *testing.T, scheme *runtime.Scheme) client.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := client.New(&rest.Config{Host: "https://" + addr, BearerToken: "x", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serveTLS(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}
