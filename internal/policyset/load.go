package policyset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
)

// DefaultNamespace is the namespace of a policy file document that names none.
const DefaultNamespace = "default"

// FromPolicyYAML reads one or more RetryPolicy YAML documents (exactly what a
// user would kubectl apply, separated by "---"), applies the API defaults,
// validates each with v1alpha1.Validate, and returns them as a Document, as the
// manager would have rendered them for a single pod. Unknown fields are errors,
// as they are for the API server under strict field validation.
//
// ConfigMap documents (apiVersion v1) may stand beside the policies: they are
// what tls.caCertificateRefs resolve against in standalone mode, as the manager
// resolves them against the cluster (docs/tls.md). So may SharedQuota
// documents: what quotaRef resolves against (docs/quota.md). A namespace is
// judged by the label kubernetes.io/metadata.name alone, so an empty
// namespaceSelector ({}) admits every policy. Other kinds are errors.
func FromPolicyYAML(data []byte) (Document, error) {
	return FromPolicyFiles(data)
}

// FromPolicyFiles is FromPolicyYAML over several files read as one input: a
// policy in one file may name a CA ConfigMap in another.
func FromPolicyFiles(files ...[]byte) (Document, error) {
	return FromPolicyFilesIn(DefaultNamespace, files...)
}

// FromPolicyFilesIn is FromPolicyFiles for a pod in callerNamespace: the
// Gateway API routes among the documents apply as they do to such a pod
// (docs/gateway-api.md#hosts).
func FromPolicyFilesIn(callerNamespace string, files ...[]byte) (Document, error) {
	pf := policyFiles{configMaps: map[string]map[string]string{}, quotas: map[string]*v1alpha1.SharedQuota{},
		budgets: gatewayroute.Budgets{}}
	for f, data := range files {
		if err := pf.read(data, f, len(files) > 1); err != nil {
			return Document{}, err
		}
	}
	doc := Document{Version: DocumentVersion}
	for _, p := range pf.policies {
		rp, err := pf.render(p)
		if err != nil {
			return Document{}, err
		}
		doc.Policies = append(doc.Policies, rp)
	}
	routes, err := pf.renderRoutes(callerNamespace)
	if err != nil {
		return Document{}, err
	}
	doc.Policies = append(doc.Policies, routes...)
	if len(doc.Policies) == 0 && len(pf.routes)+len(pf.grpcRoutes) == 0 {
		return Document{}, errors.New("no RetryPolicy or HTTPRoute documents found")
	}
	quotas, err := pf.renderQuotas(doc.Policies)
	if err != nil {
		return Document{}, err
	}
	doc.Quotas = quotas
	return doc, nil
}

// policyFiles is what the documents of policy files hold.
type policyFiles struct {
	// policies are defaulted and valid, in the order read.
	policies []*v1alpha1.RetryPolicy
	// configMaps are the data of the ConfigMaps, by namespace/name.
	configMaps map[string]map[string]string
	// quotas are the SharedQuotas, defaulted and valid, by name.
	quotas map[string]*v1alpha1.SharedQuota
	// routes are the HTTPRoutes with a Service parent, and budgets the
	// retry budgets of the XBackendTrafficPolicies (docs/gateway-api.md).
	routes     []*gwv1.HTTPRoute
	grpcRoutes []*gwv1.GRPCRoute
	budgets    gatewayroute.Budgets
}

// read adds the documents of file number f; errors name the document, and the
// file too when there are several.
func (pf *policyFiles) read(data []byte, f int, several bool) error {
	reader := utilyaml.NewYAMLReader(bufioReader(data))
	for i := 0; ; i++ {
		where := fmt.Sprintf("document %d", i)
		if several {
			where = fmt.Sprintf("file %d, document %d", f, i)
		}
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || isOnlyComments(raw) {
			continue
		}
		if err := pf.add(raw, where); err != nil {
			return err
		}
	}
}

// add adds one document, a v1 ConfigMap, a SharedQuota or a RetryPolicy,
// found at where.
func (pf *policyFiles) add(raw []byte, where string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if tm.APIVersion == "v1" && tm.Kind == "ConfigMap" {
		var cm corev1.ConfigMap
		if err := v1alpha1.DecodeStrict(raw, &cm); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if cm.Namespace == "" {
			cm.Namespace = DefaultNamespace
		}
		pf.configMaps[cm.Namespace+"/"+cm.Name] = cm.Data
		return nil
	}
	if tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "SharedQuota" {
		q, err := decodeQuota(raw, where)
		if err != nil {
			return err
		}
		if _, dup := pf.quotas[q.Name]; dup {
			return fmt.Errorf("%s: SharedQuota %s is given twice", where, q.Name)
		}
		pf.quotas[q.Name] = q
		return nil
	}
	switch {
	case tm.APIVersion == httpRouteAPIVersion && tm.Kind == "HTTPRoute":
		return pf.addRoute(raw, where)
	case tm.APIVersion == httpRouteAPIVersion && tm.Kind == "GRPCRoute":
		return pf.addGRPCRoute(raw, where)
	case tm.APIVersion == backendPolicyAPIVersion && tm.Kind == "XBackendTrafficPolicy":
		return pf.addBackendPolicy(raw, where)
	}
	p, err := decodePolicy(raw, where)
	if err != nil {
		return err
	}
	pf.policies = append(pf.policies, p)
	return nil
}

// decodePolicy decodes a RetryPolicy document found at where strictly, applies
// the API defaults and validates it.
func decodePolicy(raw []byte, where string) (*v1alpha1.RetryPolicy, error) {
	var p v1alpha1.RetryPolicy
	if err := v1alpha1.DecodeStrict(raw, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if p.APIVersion != v1alpha1.GroupVersion.String() || p.Kind != "RetryPolicy" {
		return nil, fmt.Errorf("%s: apiVersion/kind is %q/%q; want %s/RetryPolicy (or %s/SharedQuota, v1/ConfigMap for a CA, %s/HTTPRoute or GRPCRoute, %s/XBackendTrafficPolicy)",
			where, p.APIVersion, p.Kind, v1alpha1.GroupVersion.String(), v1alpha1.GroupVersion.String(), httpRouteAPIVersion, backendPolicyAPIVersion)
	}
	if p.Name == "" {
		return nil, fmt.Errorf("%s: metadata.name: Required value", where)
	}
	if p.Namespace == "" {
		p.Namespace = DefaultNamespace
	}
	v1alpha1.SetDefaults(&p)
	if errs := v1alpha1.Validate(&p); len(errs) > 0 {
		return nil, fmt.Errorf("RetryPolicy %s/%s: %w", p.Namespace, p.Name, errs.ToAggregate())
	}
	return &p, nil
}

// decodeQuota decodes a SharedQuota document found at where strictly, applies
// the API defaults and validates it.
func decodeQuota(raw []byte, where string) (*v1alpha1.SharedQuota, error) {
	var q v1alpha1.SharedQuota
	if err := v1alpha1.DecodeStrict(raw, &q); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if q.Name == "" {
		return nil, fmt.Errorf("%s: metadata.name: Required value", where)
	}
	v1alpha1.SetSharedQuotaDefaults(&q)
	if errs := v1alpha1.ValidateSharedQuota(&q); len(errs) > 0 {
		return nil, fmt.Errorf("SharedQuota %s: %w", q.Name, errs.ToAggregate())
	}
	return &q, nil
}

// renderQuotas resolves the quotaRefs of policies against the SharedQuota
// documents, as the manager resolves them against the cluster: a quota that
// is not in the files, or does not admit the policy's namespace, refuses the
// files. The credentials come from the sidecar's --quota-credentials-file,
// never from the YAML.
func (pf *policyFiles) renderQuotas(policies []Policy) ([]Quota, error) {
	for _, p := range policies {
		for i, u := range p.Upstreams {
			if u.QuotaRef == nil {
				continue
			}
			fp := fmt.Sprintf("RetryPolicy %s/%s: spec.upstreams[%d].quotaRef.name", p.Namespace, p.Name, i)
			q, ok := pf.quotas[u.QuotaRef.Name]
			if !ok {
				return nil, fmt.Errorf("%s: Not found: %q: no SharedQuota %s in the policy files (give it as a document of a --policy-file)",
					fp, u.QuotaRef.Name, u.QuotaRef.Name)
			}
			admitted, err := Admits(q, StandaloneNamespaceLabels(p.Namespace))
			if err != nil {
				return nil, err
			}
			if !admitted {
				return nil, fmt.Errorf("%s: Forbidden: SharedQuota %s does not admit namespace %s (%s; spec.consumers.namespaceSelector {} admits every namespace)",
					fp, q.Name, p.Namespace, v1alpha1.ReasonQuotaNotAllowed)
			}
		}
	}
	var out []Quota
	for _, name := range QuotaRefs(policies) {
		out = append(out, RenderQuota(pf.quotas[name], nil))
	}
	return out, nil
}

// render renders p as the manager would for a single pod, its
// tls.caCertificateRefs resolved against the ConfigMap documents.
func (pf *policyFiles) render(p *v1alpha1.RetryPolicy) (Policy, error) {
	bundles, errs := ResolveCABundles(p, MapLookup(pf.configMaps, p.Namespace+"/"))
	if len(errs) > 0 {
		return Policy{}, fmt.Errorf("RetryPolicy %s/%s: %w (give the CA ConfigMap as a document of a --policy-file, or use the system roots: wellKnownCACertificates: System with SSL_CERT_FILE)",
			p.Namespace, p.Name, errs.ToAggregate())
	}
	rp, err := FromRetryPolicy(p, 1)
	if err != nil {
		return Policy{}, err
	}
	for i := range rp.Upstreams {
		rp.Upstreams[i].CABundle = bundles[i]
	}
	return rp, nil
}

// FromRetryPolicy renders one valid policy as the manager does, for readyPods
// ready selected pods (see RenderUpstream); an error names the policy and the
// field.
func FromRetryPolicy(p *v1alpha1.RetryPolicy, readyPods int32) (Policy, error) {
	out := Policy{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation}
	if p.Spec.PodSelector != nil {
		out.PodSelector = p.Spec.PodSelector.DeepCopy()
	}
	for i, u := range p.Spec.Upstreams {
		ru, err := RenderUpstream(u, readyPods)
		if err != nil {
			return Policy{}, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
		}
		out.Upstreams = append(out.Upstreams, ru)
	}
	return out, nil
}

func isOnlyComments(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
