package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// certHostList is the names of the self-signed serving certificate:
// --webhook-url-host first, then --webhook-cert-hosts. cert-controller renews
// a certificate that does not cover its first name, so a local run with a new
// host gets a certificate for it.
//
// cert-controller writes every name as a DNS name, and a TLS client checks an
// IP address only against a certificate's IP addresses: the API server would
// refuse the certificate of an https://<IP> URL. An IP address is therefore
// an error here, not a failing admission call later (docs/manager.md).
func (o options) certHostList() ([]string, error) {
	if o.certSecret == "" {
		if o.webhookURLHost != "" {
			return nil, fmt.Errorf("--webhook-url-host: needs --webhook-cert-secret, the self-signed certificate it is named in")
		}
		return nil, nil
	}
	hosts := splitList(o.certHosts)
	if o.webhookURLHost != "" {
		hosts = slices.DeleteFunc(hosts, func(h string) bool { return h == o.webhookURLHost })
		hosts = append([]string{o.webhookURLHost}, hosts...)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("--webhook-cert-hosts: at least one DNS name is required")
	}
	for _, h := range hosts {
		if net.ParseIP(h) != nil {
			return nil, fmt.Errorf("--webhook-cert-hosts, --webhook-url-host: %q is an IP address; the self-signed certificate names DNS names only, "+
				"such as localhost or the webhook Service's name (docs/manager.md)", h)
		}
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return nil, fmt.Errorf("--webhook-cert-hosts, --webhook-url-host: %q is not a DNS name: %s", h, strings.Join(errs, "; "))
		}
	}
	return hosts, nil
}

// prepareLocalRun readies the cluster for a manager running outside it
// (--webhook-url-host). It creates Secret --webhook-cert-secret when it is
// missing (cert-controller fills the Secret but does not create it; in the
// cluster the manifests ship it empty), and points every webhook of the two
// configurations at https://<host>:<webhook-port><path>.
func (o options) prepareLocalRun(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.operatorNamespace, Name: o.certSecret}}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("--webhook-cert-secret: creating Secret %s/%s: %w", o.operatorNamespace, o.certSecret, err)
	}
	var m admissionv1.MutatingWebhookConfiguration
	var v admissionv1.ValidatingWebhookConfiguration
	for _, wc := range []struct {
		kind, name string
		obj        client.Object
		configs    func() []*admissionv1.WebhookClientConfig
	}{
		{"MutatingWebhookConfiguration", o.mutatingConfig, &m, func() (out []*admissionv1.WebhookClientConfig) {
			for i := range m.Webhooks {
				out = append(out, &m.Webhooks[i].ClientConfig)
			}
			return out
		}},
		{"ValidatingWebhookConfiguration", o.validatingConfig, &v, func() (out []*admissionv1.WebhookClientConfig) {
			for i := range v.Webhooks {
				out = append(out, &v.Webhooks[i].ClientConfig)
			}
			return out
		}},
	} {
		if err := c.Get(ctx, types.NamespacedName{Name: wc.name}, wc.obj); err != nil {
			return fmt.Errorf("reading %s %s: %w", wc.kind, wc.name, err)
		}
		orig := wc.obj.DeepCopyObject().(client.Object)
		for _, cc := range wc.configs() {
			pointAt(cc, o.webhookURLHost, o.webhookPort)
		}
		if err := c.Patch(ctx, wc.obj, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("patching %s %s: %w", wc.kind, wc.name, err)
		}
	}
	setupLog.Info("webhook configurations point at this process", "urlHost", o.webhookURLHost, "port", o.webhookPort,
		"secret", o.operatorNamespace+"/"+o.certSecret)
	return nil
}

// pointAt makes cc call https://host:port<path>, the path taken from its
// Service reference, or from its URL when an earlier local run replaced that.
func pointAt(cc *admissionv1.WebhookClientConfig, host string, port int) {
	path := ""
	switch {
	case cc.Service != nil && cc.Service.Path != nil:
		path = *cc.Service.Path
	case cc.URL != nil:
		if u, err := url.Parse(*cc.URL); err == nil {
			path = u.Path
		}
	}
	u := "https://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
	cc.URL, cc.Service = &u, nil
}
