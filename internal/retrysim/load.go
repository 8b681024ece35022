package retrysim

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// PolicyFile is a policy file read and parsed once: its compiled upstreams,
// and the document they came from for what else a command needs of it (the
// SharedQuota an upstream draws on).
type PolicyFile struct {
	Set *retrypolicy.Set
	// Rules are the compiled rules of the file's Gateway API routes, by
	// their name for --upstream: "<route>/rules/<i>" (RuleName).
	Rules map[string]*retrypolicy.Policy
	path  string
	doc   policyset.Document
}

// RuleName names rule i of a route for --upstream.
func RuleName(route string, i int) string { return fmt.Sprintf("%s/rules/%d", route, i) }

// LoadPolicyFile reads RetryPolicy YAML documents with the sidecar's own
// --policy-file loader (defaults, the API's validation with field paths, the
// same compilation), so an invalid file gives the API server's errors.
func LoadPolicyFile(path string) (*retrypolicy.Set, error) {
	f, err := ReadPolicyFile(path)
	if err != nil {
		return nil, err
	}
	return f.Set, nil
}

// ReadPolicyFile is LoadPolicyFile keeping the parsed file.
func ReadPolicyFile(path string) (*PolicyFile, error) {
	if path == "" {
		return nil, &UsageError{Msg: "-f: name a RetryPolicy (or HTTPRoute) YAML file"}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &UsageError{Msg: "-f: " + err.Error()}
	}
	doc, err := policyset.FromPolicyYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	set, err := policyset.Compile(doc.Policies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rules, err := compileRules(doc.Policies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &PolicyFile{Set: set, Rules: rules, path: path, doc: doc}, nil
}

// compileRules compiles the route rules of policies, by RuleName.
func compileRules(policies []policyset.Policy) (map[string]*retrypolicy.Policy, error) {
	rules := map[string]*retrypolicy.Policy{}
	for _, p := range policies {
		for _, u := range p.Upstreams {
			if u.Route == nil {
				continue
			}
			compiled, err := policyset.CompileRoutes([]policyset.Policy{{Namespace: p.Namespace, Name: p.Name, Upstreams: []policyset.Upstream{u}}})
			if err != nil {
				return nil, err
			}
			rules[RuleName(u.Route.Name, u.Route.Rule)] = compiled.Policies[0]
		}
	}
	return rules, nil
}

// Pick is PickUpstream over the file's upstreams and route rules: a rule
// is named "<route>/rules/<i>", or "<route>" when the route has one rule.
func (f *PolicyFile) Pick(name string) (*retrypolicy.Policy, error) {
	if len(f.Rules) == 0 {
		return PickUpstream(f.Set, name)
	}
	if p, ok := f.Rules[name]; ok {
		return p, nil
	}
	if p, ok := f.Rules[RuleName(name, 0)]; ok && f.Rules[RuleName(name, 1)] == nil {
		return p, nil
	}
	if name == "" && len(f.Set.Policies()) == 0 && len(f.Rules) == 1 {
		for _, p := range f.Rules {
			return p, nil
		}
	}
	if len(f.Set.Policies()) > 0 {
		if p, err := PickUpstream(f.Set, name); err == nil || name == "" && len(f.Set.Policies()) == 1 {
			return p, err
		}
	}
	var names []string
	for _, p := range f.Set.Policies() {
		names = append(names, p.Name())
	}
	for n := range f.Rules {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, &UsageError{Msg: fmt.Sprintf("--upstream %q: name an upstream or a route rule of the file: %s", name, strings.Join(names, ", "))}
}

// UsageError is a mistake in the command line (exit code 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// PickUpstream returns the upstream named name ("" when the set has exactly
// one). A name may be given as "upstream" or, when the loader had to qualify
// it, "policy/upstream".
func PickUpstream(set *retrypolicy.Set, name string) (*retrypolicy.Policy, error) {
	ps := set.Policies()
	var names []string
	for _, p := range ps {
		names = append(names, p.Name())
	}
	sort.Strings(names)
	if name == "" {
		if len(ps) == 1 {
			return ps[0], nil
		}
		return nil, &UsageError{Msg: fmt.Sprintf("--upstream: the file has %d upstreams; name one of %s", len(ps), strings.Join(names, ", "))}
	}
	var found []*retrypolicy.Policy
	for _, p := range ps {
		if p.Name() == name || strings.HasSuffix(p.Name(), "/"+name) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, &UsageError{Msg: fmt.Sprintf("--upstream %q: no such upstream; the file has %s", name, strings.Join(names, ", "))}
	}
	return nil, &UsageError{Msg: fmt.Sprintf("--upstream %q: ambiguous; name one of %s", name, strings.Join(names, ", "))}
}

// SharedQuotaOf returns the SharedQuota that the upstream p of the file
// draws on (its quotaRef, resolved against the SharedQuota documents of the
// file, as the sidecar's --policy-file does), or nil if it has none.
func (f *PolicyFile) SharedQuotaOf(p *retrypolicy.Policy) (*quota.Spec, error) {
	doc, path := f.doc, f.path
	names := policyset.NamesOf(doc.Policies)
	for _, pol := range doc.Policies {
		for _, u := range pol.Upstreams {
			if u.QuotaRef == nil || p.Name() != names.Of(pol.Name, u.Name) {
				continue
			}
			q, ok := doc.Quota(u.QuotaRef.Name)
			if !ok {
				return nil, fmt.Errorf("%s: quotaRef %q: no SharedQuota of that name in the file", path, u.QuotaRef.Name)
			}
			spec := q.Spec()
			return &spec, nil
		}
	}
	return nil, nil
}
