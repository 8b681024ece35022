package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	const sub = "check"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	output := outputFlag(fs)
	if err := parseNoArgs(fs, args, output); err != nil {
		return usageErr(stderr, sub, err)
	}
	c, _, err := cf.client()
	if err != nil {
		return failed(stderr, sub, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := checkCluster(ctx, c)
	if err != nil {
		return failed(stderr, sub, err)
	}
	code := exitOK
	if r.Findings > 0 {
		code = exitFindings
	}
	return report(stdout, stderr, *output, r, code, func() { printCheck(stdout, r) })
}

// printCheck writes the check report for people: one line per check, the
// opted-in namespaces and the number of findings.
func printCheck(stdout io.Writer, r CheckReport) {
	for _, ch := range r.Checks {
		mark := "ok  "
		if !ch.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(stdout, "%s %s: %s\n", mark, ch.Name, wrapWords(ch.Detail, 94-len(ch.Name), "       "))
	}
	ns := "none"
	if len(r.OptedInNamespaces) > 0 {
		ns = strings.Join(r.OptedInNamespaces, ", ")
	}
	fmt.Fprintf(stdout, "namespaces opted in (retry.dev/injection=enabled): %s\n", wrapWords(ns, 46, "  "))
	fmt.Fprintf(stdout, "%d finding(s)\n", r.Findings)
}

// Check is one line of the check report.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// CheckReport is what check found.
type CheckReport struct {
	Checks            []Check  `json:"checks"`
	Findings          int      `json:"findings"`
	OptedInNamespaces []string `json:"optedInNamespaces"`
}

func (r *CheckReport) add(name string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	if !ok {
		r.Findings++
	}
}

// checkCluster inspects the installation: CRD, webhooks and their CA bundles,
// the manager's webhook endpoints, opted-in pods without a sidecar, policies
// not accepted, SharedQuotas whose store the manager cannot reach.
func checkCluster(ctx context.Context, c client.Client) (CheckReport, error) {
	r := CheckReport{Checks: []Check{}, OptedInNamespaces: []string{}}
	for _, check := range []func(context.Context, client.Client) error{r.checkCRD, r.checkWebhooks, r.checkPods, r.checkPolicies, r.checkQuotas} {
		if err := check(ctx, c); err != nil {
			return r, err
		}
	}
	return r, nil
}

// checkCRD checks that the RetryPolicy CRD is installed and serves v1alpha1.
func (r *CheckReport) checkCRD(ctx context.Context, c client.Client) error {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	switch err := c.Get(ctx, client.ObjectKey{Name: crdName}, crd); {
	case apierrors.IsNotFound(err):
		r.add("crd", false, "CRD %s is not installed (make install)", crdName)
	case err != nil:
		return err
	default:
		r.add("crd", crdServes(crd, v1alpha1.GroupVersion.Version), "%s", crdDetail(crd))
	}
	return nil
}

// checkWebhooks checks each of the two webhooks: installed with its
// failurePolicy, a CA bundle, and an endpoint that answers.
func (r *CheckReport) checkWebhooks(ctx context.Context, c client.Client) error {
	inject, validate, err := findWebhooks(ctx, c)
	if err != nil {
		return err
	}
	for _, w := range []struct {
		name string
		info *webhookInfo
		want admissionv1.FailurePolicyType
	}{{injectWebhook, inject, admissionv1.Ignore}, {validateWebhook, validate, admissionv1.Fail}} {
		if w.info == nil {
			r.add("webhook "+w.name, false, "not installed: the manager's webhook configuration is missing")
			continue
		}
		fp := admissionv1.Fail // the API default
		if w.info.failurePolicy != nil {
			fp = *w.info.failurePolicy
		}
		r.add("webhook "+w.name, fp == w.want, "in %s, failurePolicy %s (want %s)", w.info.config, fp, w.want)
		ok, detail := checkCABundle(w.info.cc.CABundle)
		r.add("caBundle "+w.name, ok, "%s", detail)
		ok, detail = checkEndpoint(ctx, c, w.info.cc)
		r.add("endpoint "+w.name, ok, "%s", detail)
	}
	return nil
}

// findWebhooks finds the injecting and the validating webhook in the
// cluster's webhook configurations (nil: not installed).
func findWebhooks(ctx context.Context, c client.Client) (inject, validate *webhookInfo, err error) {
	var mut admissionv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &mut); err != nil {
		return nil, nil, err
	}
	var val admissionv1.ValidatingWebhookConfigurationList
	if err := c.List(ctx, &val); err != nil {
		return nil, nil, err
	}
	for _, cfg := range mut.Items {
		for _, w := range cfg.Webhooks {
			if w.Name == injectWebhook {
				inject = &webhookInfo{config: cfg.Name, cc: w.ClientConfig, failurePolicy: w.FailurePolicy}
			}
		}
	}
	for _, cfg := range val.Items {
		for _, w := range cfg.Webhooks {
			if w.Name == validateWebhook {
				validate = &webhookInfo{config: cfg.Name, cc: w.ClientConfig, failurePolicy: w.FailurePolicy}
			}
		}
	}
	return inject, validate, nil
}

// checkPods lists the opted-in namespaces and checks that every pod the
// injector would inject now has the sidecar.
func (r *CheckReport) checkPods(ctx context.Context, c client.Client) error {
	var nss corev1.NamespaceList
	if err := c.List(ctx, &nss); err != nil {
		return err
	}
	byName := map[string]*corev1.Namespace{}
	for i := range nss.Items {
		ns := &nss.Items[i]
		byName[ns.Name] = ns
		if ns.Labels[v1alpha1.LabelNamespaceInjection] == "enabled" {
			r.OptedInNamespaces = append(r.OptedInNamespaces, ns.Name)
		}
	}
	sort.Strings(r.OptedInNamespaces)

	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return err
	}
	cfg := podinject.Config{ExcludedNamespaces: excludedNamespaces(ctx, c)}
	var missing []string
	injected := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		ns := byName[p.Namespace]
		if ns == nil || p.DeletionTimestamp != nil {
			continue
		}
		if hasSidecar(p) {
			injected++
			continue
		}
		if ok, _ := cfg.ShouldInject(ns, p); ok {
			missing = append(missing, p.Namespace+"/"+p.Name)
		}
	}
	sort.Strings(missing)
	if len(missing) == 0 {
		r.add("opted-in pods", true, "%d pod(s) with a sidecar; every opted-in pod has one", injected)
	} else {
		r.add("opted-in pods", false, "%d opted-in pod(s) without a sidecar (recreate them): %s", len(missing), listSome(missing, 5))
	}
	return nil
}

// checkPolicies checks that every RetryPolicy is accepted.
func (r *CheckReport) checkPolicies(ctx context.Context, c client.Client) error {
	var rps v1alpha1.RetryPolicyList
	if err := c.List(ctx, &rps); err != nil && !meta.IsNoMatchError(err) {
		return err
	}
	var bad []string
	for _, p := range rps.Items {
		if why := notTrue(p.Status.Conditions, v1alpha1.ConditionAccepted); why != "" {
			bad = append(bad, p.Namespace+"/"+p.Name+" ("+why+")")
		}
	}
	sort.Strings(bad)
	if len(bad) == 0 {
		r.add("policies", true, "%d RetryPolicy object(s), all accepted", len(rps.Items))
	} else {
		r.add("policies", false, "%d of %d not accepted (kubectl describe rp): %s", len(bad), len(rps.Items), listSome(bad, 5))
	}
	return nil
}

// checkQuotas reports the SharedQuotas whose store the manager does not reach
// (condition StoreReachable, docs/quota.md): their consumers run on the
// onStoreLoss share, not on the fleet's quota.
func (r *CheckReport) checkQuotas(ctx context.Context, c client.Client) error {
	var qs v1alpha1.SharedQuotaList
	if err := c.List(ctx, &qs); meta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return err
	}
	var bad []string
	for _, q := range qs.Items {
		if why := notTrue(q.Status.Conditions, v1alpha1.ConditionStoreReachable); why != "" {
			bad = append(bad, q.Name+" ("+why+")")
		}
	}
	sort.Strings(bad)
	if len(bad) == 0 {
		r.add("quotas", true, "%d SharedQuota object(s), every store reachable", len(qs.Items))
	} else {
		r.add("quotas", false, "%d of %d without a reachable store (kubectl describe sq): %s", len(bad), len(qs.Items), listSome(bad, 5))
	}
	return nil
}

// notTrue is why condition t is not True: its reason, or that there is no
// status yet; "" when it is True.
func notTrue(conds []metav1.Condition, t v1alpha1.ConditionType) string {
	cond := meta.FindStatusCondition(conds, string(t))
	switch {
	case cond == nil:
		return "no status: is the manager running?"
	case cond.Status != metav1.ConditionTrue:
		return cond.Reason
	}
	return ""
}

type webhookInfo struct {
	config        string
	cc            admissionv1.WebhookClientConfig
	failurePolicy *admissionv1.FailurePolicyType
}

func listSome(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(" and %d more", len(xs)-n)
}

func crdServes(crd *unstructured.Unstructured, version string) bool {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	served := false
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] == version && m["served"] == true {
			served = true
		}
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return served
		}
	}
	return false
}

func crdDetail(crd *unstructured.Unstructured) string {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var parts []string
	for _, v := range versions {
		m, _ := v.(map[string]any)
		s := fmt.Sprint(m["name"])
		if m["storage"] == true {
			s += " (storage)"
		}
		if m["served"] != true {
			s += " (not served)"
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%s established=%t, versions %s (this plugin speaks %s)", crdName,
		crdServes(crd, v1alpha1.GroupVersion.Version), strings.Join(parts, ", "), v1alpha1.GroupVersion.Version)
}

// checkCABundle: present, PEM certificates, at least one valid now.
func checkCABundle(b []byte) (bool, string) {
	if len(b) == 0 {
		return false, "caBundle is empty: the API server cannot verify the manager (is cert-manager's CA injector running?)"
	}
	now := time.Now()
	var certs int
	var latest time.Time
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return false, "caBundle holds a PEM block that is not a certificate: " + err.Error()
		}
		certs++
		if now.After(cert.NotBefore) && now.Before(cert.NotAfter) && cert.NotAfter.After(latest) {
			latest = cert.NotAfter
		}
	}
	switch {
	case certs == 0:
		return false, "caBundle holds no PEM certificate"
	case latest.IsZero():
		return false, fmt.Sprintf("caBundle: none of its %d certificate(s) is valid now", certs)
	}
	return true, fmt.Sprintf("%d certificate(s), valid until %s", certs, latest.UTC().Format(time.DateOnly))
}

// checkEndpoint: a service-backed webhook needs ready endpoints; a URL-backed
// one (a manager running outside the cluster) must answer TLS with a
// certificate the caBundle verifies.
func checkEndpoint(ctx context.Context, c client.Client, cc admissionv1.WebhookClientConfig) (bool, string) {
	if svc := cc.Service; svc != nil {
		var eps discoveryv1.EndpointSliceList
		if err := c.List(ctx, &eps, client.InNamespace(svc.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
		}
		if ready == 0 {
			return false, fmt.Sprintf("service %s/%s has no ready endpoint: is the manager running and ready?", svc.Namespace, svc.Name)
		}
		return true, fmt.Sprintf("service %s/%s: %d ready endpoint(s)", svc.Namespace, svc.Name, ready)
	}
	if cc.URL == nil {
		return false, "clientConfig has neither service nor url"
	}
	u, err := url.Parse(*cc.URL)
	if err != nil {
		return false, "url: " + err.Error()
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cc.CABundle)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second},
		Config: &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", u.Host)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return false, fmt.Sprintf("%s answers, but with a certificate the caBundle does not verify", u.Host)
		}
		return false, fmt.Sprintf("%s does not answer: %v", u.Host, err)
	}
	conn.Close()
	return true, fmt.Sprintf("%s answers TLS with a certificate the caBundle verifies", u.Host)
}
