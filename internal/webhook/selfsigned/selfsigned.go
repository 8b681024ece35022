// Package selfsigned provides webhook serving certificates without cert-manager,
// for running the manager on a developer machine or a cluster without it: a
// self-signed CA and a serving certificate written to the directory the webhook
// server reads (controller-runtime's certwatcher picks up rewritten files), and
// the CA written into the caBundle of the manager's own webhook configurations.
package selfsigned

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Files written into the certificate directory.
const (
	CACertFile = "ca.crt"
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
)

const (
	validity = 365 * 24 * time.Hour
	// renewBefore: a certificate closer than this to expiry is replaced at start.
	renewBefore = 30 * 24 * time.Hour
)

// Ensure makes dir hold a CA and a serving certificate for hosts (DNS names or
// IP addresses) valid at now for at least 30 more days, generating new ones
// when they are missing, expiring, or do not cover hosts. It returns the CA
// certificate in PEM, for the webhook configurations' caBundle.
func Ensure(dir string, hosts []string, now time.Time) ([]byte, error) {
	if caPEM, ok := current(dir, hosts, now); ok {
		return caPEM, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	caDER, ca, caKey, err := newCA(now)
	if err != nil {
		return nil, err
	}
	der, keyDER, err := newServingCertificate(hosts, now, ca, caKey)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	// Key before certificate, each by rename: the certwatcher never reads a
	// half-written file.
	for _, f := range []struct {
		name string
		data []byte
	}{{CACertFile, caPEM}, {KeyFile, keyPEM}, {CertFile, certPEM}} {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

// newCA generates a self-signed CA valid from an hour before now (clock skew
// with the API server) for a year: its certificate (DER and parsed) and key.
func newCA(now time.Time) ([]byte, *x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "retry-operator webhook CA"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew with the API server
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	return caDER, ca, caKey, nil
}

// newServingCertificate generates a key and a serving certificate for hosts
// (DNS names or IP addresses) signed by the CA, valid as long as it: the
// certificate and the key (PKCS #8), both DER.
func newServingCertificate(hosts []string, now time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return der, keyDER, nil
}

// current returns the CA when dir holds a serving certificate signed by it,
// covering hosts and valid until at least now+renewBefore.
func current(dir string, hosts []string, now time.Time) ([]byte, bool) {
	caPEM, err1 := os.ReadFile(filepath.Join(dir, CACertFile))
	certPEM, err2 := os.ReadFile(filepath.Join(dir, CertFile))
	_, err3 := os.Stat(filepath.Join(dir, KeyFile))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, false
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || now.Add(renewBefore).After(cert.NotAfter) {
		return nil, false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, false
	}
	for _, h := range hosts {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return nil, false
		}
	}
	return caPEM, true
}

// PatchWebhookConfigurations writes caPEM into the caBundle of every webhook of
// the named mutating and validating configurations. When urlHost is not empty
// (a manager running outside the cluster) each webhook's clientConfig becomes
// https://urlHost:port<path>, the path taken from its service reference, so the
// API server calls this process directly. A configuration that does not exist
// is an error: the manifests are not installed.
func PatchWebhookConfigurations(ctx context.Context, c client.Client, mutating, validating string, caPEM []byte, urlHost string, port int) error {
	if mutating != "" {
		var cfg admissionv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, types.NamespacedName{Name: mutating}, &cfg); err != nil {
			return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", mutating, err)
		}
		orig := cfg.DeepCopy()
		for i := range cfg.Webhooks {
			setClientConfig(&cfg.Webhooks[i].ClientConfig, caPEM, urlHost, port)
		}
		if err := c.Patch(ctx, &cfg, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("patching MutatingWebhookConfiguration %s: %w", mutating, err)
		}
	}
	if validating != "" {
		var cfg admissionv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, types.NamespacedName{Name: validating}, &cfg); err != nil {
			return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", validating, err)
		}
		orig := cfg.DeepCopy()
		for i := range cfg.Webhooks {
			setClientConfig(&cfg.Webhooks[i].ClientConfig, caPEM, urlHost, port)
		}
		if err := c.Patch(ctx, &cfg, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("patching ValidatingWebhookConfiguration %s: %w", validating, err)
		}
	}
	return nil
}

func setClientConfig(cc *admissionv1.WebhookClientConfig, caPEM []byte, urlHost string, port int) {
	cc.CABundle = bytes.Clone(caPEM)
	if urlHost == "" || cc.Service == nil {
		return
	}
	path := ""
	if cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	u := "https://" + net.JoinHostPort(urlHost, strconv.Itoa(port)) + path
	cc.URL, cc.Service = &u, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
