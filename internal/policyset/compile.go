package policyset

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
	"github.com/retrydev/retry-operator/internal/rules"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// The sidecar's compile: the policies of a document that apply to one pod
// (Select), turned into the compiled policies of pkg/retrypolicy (Compile,
// ToConfig), with the names their runtime state is kept under (Names).

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
			if u.Route != nil {
				continue // route rules share their Service's name on purpose
			}
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
			if u.Route != nil {
				continue // CompileRoutes
			}
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

// CompiledRoutes is the RouteTable of the selected policies' route rules
// (docs/gateway-api.md), each rule compiled, and every compiled rule, for a
// Registry to adopt (rules of one Service share its name and its state).
type CompiledRoutes struct {
	*gatewayroute.RouteTable[*retrypolicy.Policy]
	Policies []*retrypolicy.Policy
}

// CompileRoutes compiles the upstreams of policies rendered from route rules
// (Upstream.Route) into their RouteTable; nil when there are none.
func CompileRoutes(policies []Policy) (*CompiledRoutes, error) {
	var out CompiledRoutes
	table := &gatewayroute.RouteTable[*retrypolicy.Policy]{}
	for _, p := range policies {
		for _, u := range p.Upstreams {
			if u.Route == nil {
				continue
			}
			r := u.Route
			cfg, err := routeConfig(u)
			if err != nil {
				return nil, fmt.Errorf("%s %s/%s: spec.rules[%d]: %w", r.Kind, r.Namespace, r.Name, r.Rule, err)
			}
			cp, err := retrypolicy.Compile(cfg)
			if err != nil {
				return nil, fmt.Errorf("%s %s/%s: spec.rules[%d]: %w", r.Kind, r.Namespace, r.Name, r.Rule, err)
			}
			if err := table.Add(cfg.Hosts, r, cp); err != nil {
				return nil, err
			}
			out.Policies = append(out.Policies, cp)
		}
	}
	if len(out.Policies) == 0 {
		return nil, nil
	}
	table.Sort()
	out.RouteTable = table
	return &out, nil
}

// routeConfig is ToConfig for a route rule's upstream, whose name is its
// Service's (gatewayroute.ServiceName): not a DNS label on purpose, so no
// RetryPolicy upstream shares its state.
func routeConfig(u Upstream) (retrypolicy.Config, error) {
	name := u.Name
	u.Name = "route"
	cfg, err := ToConfig(u)
	cfg.Name = name
	return cfg, err
}
