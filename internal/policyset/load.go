package policyset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// DefaultNamespace is the namespace of a policy file document that names none.
const DefaultNamespace = "default"

// FromPolicyYAML reads one or more RetryPolicy YAML documents (exactly what a
// user would kubectl apply, separated by "---"), applies the API defaults,
// validates each with v1alpha1.Validate, and returns them as a Document, as the
// manager would have rendered them for a single pod. Unknown fields are errors,
// as they are for the API server under strict field validation.
func FromPolicyYAML(data []byte) (Document, error) {
	doc := Document{Version: DocumentVersion}
	reader := utilyaml.NewYAMLReader(bufioReader(data))
	for i := 0; ; i++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || isOnlyComments(raw) {
			continue
		}
		var p v1alpha1.RetryPolicy
		if err := yaml.UnmarshalStrict(raw, &p); err != nil {
			return Document{}, fmt.Errorf("document %d: %w", i, err)
		}
		if p.APIVersion != v1alpha1.GroupVersion.String() || p.Kind != "RetryPolicy" {
			return Document{}, fmt.Errorf("document %d: apiVersion/kind is %q/%q; want %s/RetryPolicy",
				i, p.APIVersion, p.Kind, v1alpha1.GroupVersion.String())
		}
		if p.Name == "" {
			return Document{}, fmt.Errorf("document %d: metadata.name: Required value", i)
		}
		if p.Namespace == "" {
			p.Namespace = DefaultNamespace
		}
		v1alpha1.SetDefaults(&p)
		if errs := v1alpha1.Validate(&p); len(errs) > 0 {
			return Document{}, fmt.Errorf("RetryPolicy %s/%s: %w", p.Namespace, p.Name, errs.ToAggregate())
		}
		doc.Policies = append(doc.Policies, FromRetryPolicy(&p, 1))
	}
	if len(doc.Policies) == 0 {
		return Document{}, errors.New("no RetryPolicy documents found")
	}
	return doc, nil
}

// FromRetryPolicy renders one valid policy as the manager does, for readyPods
// ready selected pods (see CompileUpstream).
func FromRetryPolicy(p *v1alpha1.RetryPolicy, readyPods int32) Policy {
	out := Policy{Namespace: p.Namespace, Name: p.Name, Generation: p.Generation}
	if p.Spec.PodSelector != nil {
		out.PodSelector = p.Spec.PodSelector.DeepCopy()
	}
	for _, u := range p.Spec.Upstreams {
		out.Upstreams = append(out.Upstreams, CompileUpstream(u, readyPods))
	}
	return out
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
	count := map[string]int{}
	for _, p := range policies {
		for _, u := range p.Upstreams {
			count[u.Name]++
		}
	}
	var compiled []*retrypolicy.Policy
	for _, p := range policies {
		for i, u := range p.Upstreams {
			cfg, err := ToConfig(u)
			if err != nil {
				return nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
			}
			if count[u.Name] > 1 {
				cfg.Name = p.Name + "/" + u.Name
			}
			cp, err := retrypolicy.Compile(cfg)
			if err != nil {
				return nil, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
			}
			compiled = append(compiled, cp)
		}
	}
	set, err := retrypolicy.NewSet(compiled...)
	if err != nil {
		return nil, fmt.Errorf("selected policies: %w", err)
	}
	return set, nil
}

// ToConfig converts a rendered (defaulted) upstream to the plain-Go config of
// pkg/retrypolicy. Absent optionals fall back to the API defaults so a document
// written by hand still means what the API says.
func ToConfig(u Upstream) (retrypolicy.Config, error) {
	up := u.Upstream.DeepCopy()
	p := &v1alpha1.RetryPolicy{Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{*up}}}
	v1alpha1.SetDefaults(p)
	d := p.Spec.Upstreams[0]
	var err error
	dur := func(field string, v *v1alpha1.Duration) time.Duration {
		if v == nil || err != nil {
			return 0
		}
		x, e := time.ParseDuration(string(*v))
		if e != nil {
			err = fmt.Errorf("%s: %w", field, e)
		}
		return x
	}
	cfg := retrypolicy.Config{
		Name:                  d.Name,
		Hosts:                 append([]string(nil), d.Hosts...),
		MaxAttempts:           int(*d.MaxAttempts),
		Deadline:              dur("deadline", d.Deadline),
		PerTryTimeout:         dur("perTryTimeout", d.PerTryTimeout),
		Backoff:               retrypolicy.Backoff{Base: dur("backoff.base", d.Backoff.Base), Max: dur("backoff.max", d.Backoff.Max), Jitter: retrypolicy.Jitter(*d.Backoff.Jitter)},
		RetryOnConnectFailure: *d.RetryOn.ConnectFailure,
		ReplayableMethods:     append([]string(nil), d.ReplayableMethods...),
		MaxReplayBodyBytes:    *d.MaxReplayBodyBytes,
		RetryAfterMaxWait:     dur("retryAfter.maxWait", d.RetryAfter.MaxWait),
		RetryAfterSpread:      dur("retryAfter.spread", d.RetryAfter.Spread),
		Budget:                &retrypolicy.BudgetConfig{RetryPercent: int(*d.Budget.RetryPercent), MinRetriesPerSecond: int(*d.Budget.MinRetriesPerSecond)},
	}
	for _, c := range d.RetryOn.StatusCodes {
		cfg.RetryOnStatus = append(cfg.RetryOnStatus, int(c))
	}
	if d.IdempotencyKey != nil {
		cfg.IdempotencyKeyHeader = d.IdempotencyKey.Header
	}
	if r := d.RateLimit; r != nil {
		perMinute := u.PodRequestsPerMinute
		if perMinute <= 0 {
			perMinute = float64(r.RequestsPerMinute)
		}
		burst := u.PodBurst
		if burst <= 0 {
			burst = *r.Burst
		}
		cfg.RateLimit = &retrypolicy.RateLimitConfig{RequestsPerSecond: perMinute / 60, Burst: int(burst)}
	}
	if c := d.Concurrency; c != nil {
		cfg.Concurrency = &retrypolicy.ConcurrencyConfig{
			MaxInFlight:  int(c.MaxInFlight),
			MaxQueued:    int(*c.MaxQueued),
			QueueTimeout: dur("concurrency.queueTimeout", c.QueueTimeout),
		}
	}
	return cfg, err
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
