// Package certready is the manager's readiness check for admission: a
// replica is Ready only when the certificate its webhook server serves
// chains to the CA bundle the API server holds for every one of its
// webhooks, for the name the API server dials (docs/manager.md#health).
//
// "The server listens" (controller-runtime's StartedChecker) is not enough:
// a replica that serves a certificate the API server does not trust yet (a
// CA bundle not injected, a renewed CA not copied, a Secret rewritten by
// another replica) fails every admission request sent to it, and a Service
// routes to it as soon as it is Ready.
package certready

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Checker checks the served certificate against the webhook configurations.
// Safe for concurrent use.
type Checker struct {
	// Reader reads the webhook configurations (the manager's API reader: two
	// objects, read when checked, never cached in an informer).
	Reader client.Reader
	// Mutating and Validating name the two webhook configurations.
	Mutating, Validating string
	// Addr is the webhook server's address on this replica, host:port.
	Addr string

	mu   sync.Mutex
	last []bundle // of the last read that succeeded
}

// bundle is one webhook's CA bundle and the name the API server verifies.
type bundle struct {
	webhook, serverName string
	roots               *x509.CertPool
}

// Check is a healthz.Checker: nil when the served certificate verifies
// against every webhook's CA bundle for the name in its clientConfig.
func (c *Checker) Check(req *http.Request) error {
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	leaf, inter, err := c.served(ctx)
	if err != nil {
		return err
	}
	bundles, err := c.bundles(ctx)
	if err != nil {
		return err
	}
	return verify(leaf, inter, bundles, time.Now())
}

// served is the certificate chain the local webhook server presents.
func (c *Checker) served(ctx context.Context) (*x509.Certificate, *x509.CertPool, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the chain is verified below, against the CA bundles
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook server not reachable: %w", err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, nil, errors.New("webhook server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	return certs[0], inter, nil
}

// bundles reads the CA bundles of both configurations. While the API server
// cannot be read, the bundles last read stand: they cannot change meanwhile,
// and a replica that turned unready on every API server restart would take
// its webhooks out of the Service just as the API server returns.
func (c *Checker) bundles(ctx context.Context) ([]bundle, error) {
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	err := c.Reader.Get(ctx, types.NamespacedName{Name: c.Mutating}, &m)
	if err == nil {
		err = c.Reader.Get(ctx, types.NamespacedName{Name: c.Validating}, &v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.last != nil {
			return c.last, nil
		}
		return nil, fmt.Errorf("reading the webhook configurations: %w", err)
	}
	var out []bundle
	for _, w := range m.Webhooks {
		out = append(out, newBundle(w.Name, w.ClientConfig))
	}
	for _, w := range v.Webhooks {
		out = append(out, newBundle(w.Name, w.ClientConfig))
	}
	c.last = out
	return out, nil
}

func newBundle(webhook string, cc admissionv1.WebhookClientConfig) bundle {
	b := bundle{webhook: webhook, serverName: ServerName(cc)}
	if len(cc.CABundle) > 0 {
		b.roots = x509.NewCertPool()
		if !b.roots.AppendCertsFromPEM(cc.CABundle) {
			b.roots = nil
		}
	}
	return b
}

// ServerName is the name the API server verifies a webhook's certificate
// for: <service>.<namespace>.svc for a Service reference, else the URL's
// host.
func ServerName(cc admissionv1.WebhookClientConfig) string {
	if s := cc.Service; s != nil {
		return s.Name + "." + s.Namespace + ".svc"
	}
	if cc.URL != nil {
		if u, err := url.Parse(*cc.URL); err == nil {
			return u.Hostname()
		}
	}
	return ""
}

// verify checks leaf against every bundle; the error names the first webhook
// whose API server would refuse it, and why.
func verify(leaf *x509.Certificate, inter *x509.CertPool, bundles []bundle, now time.Time) error {
	if len(bundles) == 0 {
		return errors.New("the webhook configurations have no webhooks")
	}
	for _, b := range bundles {
		if b.roots == nil {
			return fmt.Errorf("webhook %s: no CA bundle yet", b.webhook)
		}
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: b.serverName, Roots: b.roots, Intermediates: inter,
			CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return fmt.Errorf("webhook %s: the served certificate does not verify against its CA bundle for %s: %w", b.webhook, b.serverName, err)
		}
	}
	return nil
}
