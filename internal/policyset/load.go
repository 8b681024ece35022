package policyset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/rules"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
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
	pf := policyFiles{configMaps: map[string]map[string]string{}, quotas: map[string]*v1alpha1.SharedQuota{}}
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
	if len(doc.Policies) == 0 {
		return Document{}, errors.New("no RetryPolicy documents found")
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
		return nil, fmt.Errorf("%s: apiVersion/kind is %q/%q; want %s/RetryPolicy (or %s/SharedQuota, or v1/ConfigMap for a CA)",
			where, p.APIVersion, p.Kind, v1alpha1.GroupVersion.String(), v1alpha1.GroupVersion.String())
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

// Select returns the policies of doc that apply to a pod with these labels. A nil
// podLabels means "no label information" and selects every policy (the
// standalone sidecar without --pod-labels).
func Select(doc Document, podLabels map[string]string) ([]Policy, error) {
	var out []Policy
	for _, p := range doc.Policies {
		if podLabels != nil && p.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
			if err != nil {
				return nil, fmt.Errorf("RetryPolicy %s/%s: spec.podSelector: %w", p.Namespace, p.Name, err)
			}
			if !sel.Matches(labels.Set(podLabels)) {
				continue
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Compile turns the selected policies into a retrypolicy.Set. Each upstream keeps
// its own name in logs and metrics unless two selected policies use the same
// upstream name; then both are qualified as "policy/upstream" so their runtime
// state (budget, limiter, queue) stays apart.
func Compile(policies []Policy) (*retrypolicy.Set, error) {
	set, _, err := CompileUpstreams(policies)
	return set, err
}

// CompileUpstreams is Compile that also returns the rendered upstream of each
// compiled policy: what the sidecar needs beyond the retry rules (tls).
func CompileUpstreams(policies []Policy) (*retrypolicy.Set, map[*retrypolicy.Policy]Upstream, error) {
	return CompileWithQuotas(policies, nil)
}

// Names names the upstreams of a set of policies as CompileUpstreams names
// their compiled policies (retrypolicy.Config.Name, the key of an upstream's
// runtime state, its metrics label and log field): by the upstream's own
// name, or "policy/upstream" when two policies of the set name an upstream
// alike. Build it with NamesOf.
type Names struct{ shared map[string]bool }

// NamesOf is the Names of policies' upstreams.
func NamesOf(policies []Policy) Names {
	seen, shared := map[string]bool{}, map[string]bool{}
	for _, p := range policies {
		for _, u := range p.Upstreams {
			shared[u.Name] = seen[u.Name]
			seen[u.Name] = true
		}
	}
	return Names{shared: shared}
}

// Of is the name of upstream of policy:
//
//	policies "a" {payments}, "b" {payments, orders}   Of("a", "payments") = "a/payments"
//	                                                  Of("b", "orders")   = "orders"
func (n Names) Of(policy, upstream string) string {
	if n.shared[upstream] {
		return policy + "/" + upstream
	}
	return upstream
}

// CompileWithQuotas is CompileUpstreams that binds each upstream with a
// quotaRef to quotaOf(name), the runtime quota every attempt draws on (the
// sidecar's store clients, docs/quota.md). With quotaOf nil the quotas are
// left out (a tool that only reads the retry rules); a quotaOf that has no
// quota of the name refuses the policies: such an upstream is never served
// without its quota.
func CompileWithQuotas(policies []Policy, quotaOf func(name string) limits.Quota) (*retrypolicy.Set, map[*retrypolicy.Policy]Upstream, error) {
	origin := map[*retrypolicy.Policy]Upstream{}
	names := NamesOf(policies)
	var compiled []*retrypolicy.Policy
	for _, p := range policies {
		if n := len(p.Upstreams); n > rules.MaxUpstreams {
			return nil, nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams: must have at most %d items (got %d)", p.Namespace, p.Name, rules.MaxUpstreams, n)
		}
		for i, u := range p.Upstreams {
			cfg, err := ToConfig(u)
			if err != nil {
				return nil, nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
			}
			cfg.Name = names.Of(p.Name, u.Name)
			if u.QuotaRef != nil && quotaOf != nil {
				if cfg.Quota = quotaOf(u.QuotaRef.Name); cfg.Quota == nil {
					return nil, nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].quotaRef.name: Not found: %q: no such quota in the configuration",
						p.Namespace, p.Name, i, u.QuotaRef.Name)
				}
			}
			cp, err := retrypolicy.Compile(cfg)
			if err != nil {
				return nil, nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
			}
			compiled = append(compiled, cp)
			origin[cp] = u
		}
	}
	set, err := retrypolicy.NewSet(compiled...)
	if err != nil {
		return nil, nil, fmt.Errorf("selected policies: %w", err)
	}
	return set, origin, nil
}

// ToConfig converts a rendered upstream to the plain-Go config of
// pkg/retrypolicy: its durations are parsed already (the manager parsed them,
// RenderUpstream), so this is a copy. Absent optionals fall back to the API
// defaults so a document written by hand still means what the API says. It
// refuses, with the field path and the allowed values, what the Config cannot
// carry and Compile therefore cannot judge: the name (Compile's may be
// qualified), a duration that is not positive, the fleet-wide rate limit
// (Compile sees the pod's share) and tls. The rules are the API's
// (internal/rules, v1alpha1.ValidateTLS).
func ToConfig(u Upstream) (retrypolicy.Config, error) {
	if err := checkDurations(&u.UpstreamSpec); err != nil {
		return retrypolicy.Config{}, err
	}
	d, err := withDefaults(u.UpstreamSpec)
	if err != nil {
		return retrypolicy.Config{}, err
	}
	if err := checkBeyondConfig(d); err != nil {
		return retrypolicy.Config{}, err
	}
	cfg := retrypolicy.Config{
		Name:               d.Name,
		Hosts:              append([]string(nil), d.Hosts...),
		MaxAttempts:        int(*d.MaxAttempts),
		Deadline:           *d.Deadline,
		PerTryTimeout:      ptr.Deref(d.PerTryTimeout, 0),
		ConnectTimeout:     ptr.Deref(d.ConnectTimeout, 0),
		Backoff:            retrypolicy.Backoff{Base: *d.Backoff.Base, Max: *d.Backoff.Max, Jitter: retrypolicy.Jitter(*d.Backoff.Jitter)},
		RetryOn:            retryOnConditions(d.RetryOn),
		ReplayableMethods:  append([]string(nil), d.ReplayableMethods...),
		MaxReplayBodyBytes: *d.MaxReplayBodyBytes,
		RetryAfterMaxWait:  *d.RetryAfter.MaxWait,
		RetryAfterSpread:   *d.RetryAfter.Spread,
		Budget:             &limits.BudgetConfig{RetryPercent: int(*d.Budget.RetryPercent), MinRetriesPerSecond: int(*d.Budget.MinRetriesPerSecond)},
	}
	for _, c := range d.RetryOn.StatusCodes {
		cfg.RetryOnStatus = append(cfg.RetryOnStatus, int(c))
	}
	for i, name := range d.RetryOn.GRPCStatusCodes {
		n, ok := name.Number()
		if !ok {
			return retrypolicy.Config{}, fieldError(fmt.Sprintf("retryOn.grpcStatusCodes[%d]", i),
				fmt.Sprintf("must be one of %v", v1alpha1.GRPCStatusCodes()), strconv.Quote(string(name)))
		}
		cfg.RetryOnGRPCStatus = append(cfg.RetryOnGRPCStatus, n)
	}
	if d.IdempotencyKey != nil {
		cfg.IdempotencyKeyHeader = d.IdempotencyKey.Header
	}
	if r := d.RateLimit; r != nil {
		cfg.RateLimit = podRateLimit(r, u)
	}
	if pc := d.Pacing; pc != nil {
		cfg.Pacing = limits.PacingConfig{RateLimitHeaders: *pc.RateLimitHeaders, HoldOnDeferral: *pc.HoldOnDeferral}
	}
	if c := d.Concurrency; c != nil {
		cfg.Concurrency = &limits.ConcurrencyConfig{
			MaxInFlight:  int(c.MaxInFlight),
			MaxQueued:    int(*c.MaxQueued),
			QueueTimeout: *c.QueueTimeout,
		}
	}
	return cfg, nil
}

// retryOnBools maps each boolean of retryOn to its condition in
// pkg/retrypolicy: a new class of retried failure is one row here.
var retryOnBools = []struct {
	field func(*v1alpha1.RetryOn) *bool
	cond  retrypolicy.Condition
}{
	{func(r *v1alpha1.RetryOn) *bool { return r.ConnectFailure }, retrypolicy.RetryConnectFailure},
	{func(r *v1alpha1.RetryOn) *bool { return r.ResetBeforeHeaders }, retrypolicy.RetryResetBeforeHeaders},
}

// retryOnConditions is the set of conditions a (defaulted) retryOn turns on.
func retryOnConditions(r *v1alpha1.RetryOn) retrypolicy.Condition {
	var set retrypolicy.Condition
	for _, b := range retryOnBools {
		if v := b.field(r); v != nil && *v {
			set |= b.cond
		}
	}
	return set
}

// podRateLimit is the limiter of one pod for the (defaulted) rate limit r of
// u: the pod share the manager rendered, or the whole upstream's limit where a
// document written by hand gives none.
func podRateLimit(r *v1alpha1.RateLimit, u Upstream) *limits.RateLimitConfig {
	perMinute := u.PodRequestsPerMinute
	if perMinute <= 0 {
		perMinute = float64(r.RequestsPerMinute)
	}
	burst := u.PodBurst
	if burst <= 0 {
		burst = *r.Burst
	}
	return &limits.RateLimitConfig{RequestsPerSecond: perMinute / 60, Burst: int(burst)}
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

// checkBeyondConfig checks the fields of a defaulted upstream that
// retrypolicy.Config does not carry as written, so Compile cannot: the name
// (Compile's may be qualified), an empty idempotency key header (Compile's ""
// means none), the fleet-wide rate limit (Compile sees the pod's share) and
// tls. The rules are the API's: internal/rules and
// v1alpha1.ValidateTLS.
func checkBeyondConfig(d UpstreamSpec) error {
	if d.Name != "" {
		if problem := rules.NameProblem(d.Name); problem != "" {
			return fieldError("name", problem, strconv.Quote(d.Name))
		}
	}
	if k := d.IdempotencyKey; k != nil && k.Header == "" {
		return fieldError("idempotencyKey.header", "must be an HTTP header name such as Idempotency-Key", `""`)
	}
	if r := d.RateLimit; r != nil {
		if problem := rules.RequestsPerMinuteRange.Problem(int64(r.RequestsPerMinute)); problem != "" {
			return fieldError(rules.RequestsPerMinuteRange.Path, problem, r.RequestsPerMinute)
		}
		if problem := rules.BurstRange.Problem(int64(*r.Burst)); problem != "" {
			return fieldError(rules.BurstRange.Path, problem, *r.Burst)
		}
	}
	if d.TLS != nil {
		if errs := v1alpha1.ValidateTLS(d.TLS, field.NewPath("tls")); len(errs) > 0 {
			return errs[0]
		}
	}
	return nil
}

func fieldError(path, problem string, got any) error {
	return &retrypolicy.FieldError{Field: path, Detail: fmt.Sprintf("%s (got %v)", problem, got)}
}
