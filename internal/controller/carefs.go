package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// The ConfigMaps named in tls.caCertificateRefs (docs/tls.md) are a tenant's
// objects: the manager does not cache or watch ConfigMaps by any name but
// retry-policies (cache.go), so it reads them by name, past the cache, each
// time it renders the namespace, and renders the namespace again every
// CARecheck while a policy names one (a CA rotation or a ConfigMap created
// after its policy is picked up within that time). What it holds of them is
// bounded: a ca.crt over v1alpha1.MaxCACertificateBytes is cut to one byte more
// (enough to refuse it), and no more are read once v1alpha1.MaxNamespaceCABytes
// are held.

// DefaultCARecheck is how often a namespace whose policies name CA ConfigMaps
// is rendered again when nothing else happens.
const DefaultCARecheck = 30 * time.Second

// caConfigMaps reads the ca.crt of the ConfigMaps the policies name in
// tls.caCertificateRefs, by name, oldest policy first. A ConfigMap that does not
// exist is left out; one without ca.crt is an empty map. The names not read
// because the budget was spent are returned as unread.
func (r *RetryPolicyReconciler) caConfigMaps(ctx context.Context, ns string, policies []v1alpha1.RetryPolicy) (map[string]map[string]string, sets.Set[string], error) {
	data := map[string]map[string]string{}
	unread := sets.New[string]()
	held := 0
	for _, name := range caRefNames(policies) {
		if held >= v1alpha1.MaxNamespaceCABytes {
			unread.Insert(name)
			continue
		}
		var cm corev1.ConfigMap
		err := r.reader().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm)
		if apierrors.IsNotFound(err) {
			continue // Compute reports it: Accepted=False, InvalidRef
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
		}
		v, ok := cm.Data[v1alpha1.CACertificateKey]
		if !ok {
			data[name] = map[string]string{}
			continue
		}
		if len(v) > v1alpha1.MaxCACertificateBytes {
			// A copy: a substring would keep the whole value alive.
			v = strings.Clone(v[:v1alpha1.MaxCACertificateBytes+1])
		}
		data[name] = map[string]string{v1alpha1.CACertificateKey: v}
		held += len(v)
	}
	return data, unread, nil
}

// caRefNames are the ConfigMap names the policies reference, each once, the
// oldest policy's first (the order the CA budget is spent in).
func caRefNames(policies []v1alpha1.RetryPolicy) []string {
	var names []string
	seen := sets.New[string]()
	for _, p := range oldestFirst(policies) {
		for _, name := range policyCARefs(p) {
			if !seen.Has(name) {
				seen.Insert(name)
				names = append(names, name)
			}
		}
	}
	return names
}

func policyCARefs(p *v1alpha1.RetryPolicy) []string {
	var names []string
	for _, u := range p.Spec.Upstreams {
		if u.TLS == nil {
			continue
		}
		for _, r := range u.TLS.CACertificateRefs {
			names = append(names, r.Name)
		}
	}
	return names
}

// unreadCARefs are the errors of p's caCertificateRefs that name an unread
// ConfigMap.
func unreadCARefs(p *v1alpha1.RetryPolicy, unread sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	for i, u := range p.Spec.Upstreams {
		if u.TLS == nil {
			continue
		}
		for j, ref := range u.TLS.CACertificateRefs {
			if unread.Has(ref.Name) {
				errs = append(errs, caBudgetError(p, i, j))
			}
		}
	}
	return errs
}

// overCABudget is the error of the first upstream of p whose bundle takes the
// namespace's CA bundles, caBytes before p, over v1alpha1.MaxNamespaceCABytes.
func overCABudget(p *v1alpha1.RetryPolicy, bundles []string, caBytes int) field.ErrorList {
	for i, b := range bundles {
		caBytes += len(b)
		if caBytes > v1alpha1.MaxNamespaceCABytes {
			return field.ErrorList{caBudgetError(p, i, 0)}
		}
	}
	return nil
}

func caBudgetError(p *v1alpha1.RetryPolicy, upstream, ref int) *field.Error {
	fp := field.NewPath("spec", "upstreams").Index(upstream).Child("tls", "caCertificateRefs").Index(ref).Child("name")
	return field.Invalid(fp, p.Spec.Upstreams[upstream].TLS.CACertificateRefs[ref].Name,
		fmt.Sprintf("the CA certificates the policies of namespace %s name come to more than %d bytes (older policies first), the most its %s ConfigMap holds",
			p.Namespace, v1alpha1.MaxNamespaceCABytes, v1alpha1.PoliciesConfigMapName))
}

func bundleBytes(bundles []string) int {
	n := 0
	for _, b := range bundles {
		n += len(b)
	}
	return n
}

// caRecheckAfter is when a namespace with these policies is to be rendered
// again for its CA ConfigMaps; 0 when they name none.
func (r *RetryPolicyReconciler) caRecheckAfter(policies []v1alpha1.RetryPolicy) time.Duration {
	for i := range policies {
		if len(policyCARefs(&policies[i])) > 0 {
			if r.CARecheck > 0 {
				return r.CARecheck
			}
			return DefaultCARecheck
		}
	}
	return 0
}

// reader reads past the cache: Reader, or Client when it is nil.
func (r *RetryPolicyReconciler) reader() client.Reader {
	if r.Reader == nil {
		return r.Client
	}
	return r.Reader
}
