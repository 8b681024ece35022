package controller

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// Input is everything the reconciler gathers for one namespace.
type Input struct {
	// Policies are the RetryPolicies of the namespace, in any order.
	Policies []v1alpha1.RetryPolicy
	// Pods are the injected pods of the namespace (the label the injector sets).
	Pods []PodInfo
	// Previous is the document currently in the ConfigMap (zero if none): the
	// source of the last accepted rendering of a policy whose newest generation
	// is invalid.
	Previous policyset.Document
}

// PodInfo is what rate sharing needs to know about a pod.
type PodInfo struct {
	Labels map[string]string
	Ready  bool
}

// Output is the desired state of the namespace.
type Output struct {
	// Document is what the ConfigMap must hold; Data is its encoding (nil when no
	// policy is rendered: the ConfigMap must not exist) and Hash its content hash.
	Document policyset.Document
	Data     []byte
	Hash     string
	// UIDs of the rendered policies, by name: the ConfigMap's owners.
	UIDs map[string]types.UID
	// Status is the desired status of each policy, by name.
	Status map[string]PolicyStatus
}

// PolicyStatus is the desired status of one policy.
type PolicyStatus struct {
	Accepted   metav1.Condition
	Programmed metav1.Condition
	// Ready summarises Accepted and Programmed (ReadyCondition).
	Ready metav1.Condition
	// UpstreamCount is the number of upstreams of the newest generation.
	UpstreamCount int32
	// SelectedPods counts the ready injected pods the policy selects.
	SelectedPods int32
	// RenderedGeneration is the generation in the ConfigMap, 0 when not rendered.
	RenderedGeneration int64
}

// candidate is a policy competing for its hosts: either its current generation
// (valid) or, when that is invalid, its last accepted rendering.
type candidate struct {
	policy   *v1alpha1.RetryPolicy
	selector *metav1.LabelSelector
	// upstreams as rendered: defaults applied (not yet the pod share).
	upstreams  []v1alpha1.Upstream
	generation int64
	valid      bool
}

// Compute is the pure heart of the reconciler: validate, resolve conflicts,
// render, and derive every status. Identical input gives identical output,
// byte for byte.
//
// Truth table for one policy:
//
//	newest generation  earlier generation rendered  older policy claims a host  Accepted          Programmed
//	valid              -                            no                          True  Valid       True  Rendered (this generation)
//	valid              -                            yes                         False Conflict    False NotRendered
//	invalid            yes                          no                          False Invalid     True  Rendered (earlier generation)
//	invalid            yes                          yes                         False Invalid     False NotRendered
//	invalid            no                           -                           False Invalid     False NotRendered
func Compute(in Input) (Output, error) {
	previous := make(map[string]policyset.Policy, len(in.Previous.Policies))
	for _, p := range in.Previous.Policies {
		previous[p.Name] = p
	}

	var (
		cands    []candidate
		accepted = map[string]metav1.Condition{}
	)
	for i := range in.Policies {
		p := &in.Policies[i]
		if p.DeletionTimestamp != nil {
			continue // on its way out: neither rendered nor given a status
		}
		if errs := v1alpha1.Validate(p); len(errs) > 0 {
			msg := errs.ToAggregate().Error()
			if prev, ok := previous[p.Name]; ok {
				msg = fmt.Sprintf("%s; generation %d, the last accepted, stays in force", msg, prev.Generation)
				ups := make([]v1alpha1.Upstream, len(prev.Upstreams))
				for j := range prev.Upstreams {
					ups[j] = prev.Upstreams[j].Upstream
				}
				cands = append(cands, candidate{policy: p, selector: prev.PodSelector, upstreams: ups, generation: prev.Generation})
			}
			accepted[p.Name] = condition(ConditionAccepted, metav1.ConditionFalse, ReasonInvalid, msg)
			continue
		}
		cands = append(cands, candidate{policy: p, selector: p.Spec.PodSelector, upstreams: p.Spec.Upstreams, generation: p.Generation, valid: true})
	}

	// The older policy wins a conflict: creationTimestamp, then name, is an order
	// every replica of the controller agrees on and that a new policy cannot jump.
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i].policy, cands[j].policy
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	var winners []candidate
	for _, c := range cands {
		if w, host, lost := firstConflict(c, winners); lost {
			if c.valid {
				accepted[c.policy.Name] = condition(ConditionAccepted, metav1.ConditionFalse, ReasonConflict,
					fmt.Sprintf("host %q is already claimed by RetryPolicy %q (older) for pods both policies select; the older policy wins", host, w.policy.Name))
			}
			continue
		}
		winners = append(winners, c)
		if c.valid {
			accepted[c.policy.Name] = condition(ConditionAccepted, metav1.ConditionTrue, ReasonValid,
				fmt.Sprintf("%d upstream(s) accepted", len(c.upstreams)))
		}
	}

	out := Output{Status: make(map[string]PolicyStatus, len(in.Policies)), UIDs: map[string]types.UID{}}
	selected := map[string]int32{}
	for i := range in.Policies {
		p := &in.Policies[i]
		if p.DeletionTimestamp == nil {
			selected[p.Name] = countReady(in.Pods, p.Spec.PodSelector)
		}
	}
	for _, w := range winners {
		pods := countReady(in.Pods, w.selector)
		rp := policyset.Policy{Namespace: w.policy.Namespace, Name: w.policy.Name, Generation: w.generation, PodSelector: w.selector.DeepCopy()}
		for _, u := range w.upstreams {
			rp.Upstreams = append(rp.Upstreams, policyset.CompileUpstream(u, pods))
		}
		out.Document.Policies = append(out.Document.Policies, rp)
		out.UIDs[w.policy.Name] = w.policy.UID
		if !w.valid {
			selected[w.policy.Name] = pods // the selector in force is the rendered one
		}
	}
	out.Document.Version = policyset.DocumentVersion
	if len(out.Document.Policies) > 0 {
		data, err := policyset.Marshal(out.Document)
		if err != nil {
			return Output{}, err
		}
		out.Data, out.Hash = data, policyset.Hash(data)
	}

	rendered := map[string]int64{}
	for _, p := range out.Document.Policies {
		rendered[p.Name] = p.Generation
	}
	upstreams := map[string]int32{}
	for i := range in.Policies {
		upstreams[in.Policies[i].Name] = int32(len(in.Policies[i].Spec.Upstreams))
	}
	for name, acc := range accepted {
		st := PolicyStatus{Accepted: acc, UpstreamCount: upstreams[name], SelectedPods: selected[name], RenderedGeneration: rendered[name]}
		if gen, ok := rendered[name]; ok {
			st.Programmed = condition(ConditionProgrammed, metav1.ConditionTrue, ReasonRendered,
				fmt.Sprintf("generation %d is rendered into ConfigMap %s (%s %s)", gen, policyset.ConfigMapName, policyset.ConfigMapKey, out.Hash))
		} else {
			st.Programmed = condition(ConditionProgrammed, metav1.ConditionFalse, ReasonNotRendered,
				fmt.Sprintf("not in ConfigMap %s: Accepted is False (%s)", policyset.ConfigMapName, acc.Reason))
		}
		st.Ready = ReadyCondition(st.Accepted, st.Programmed)
		out.Status[name] = st
	}
	return out, nil
}

// ReadyCondition is the summary condition (kstatus' "Ready"): the first of
// Accepted, Programmed that is not True decides it.
//
//	Accepted  Programmed  Ready
//	True      True        True  Reconciled
//	True      False       False <Programmed's reason>
//	False     any         False <Accepted's reason> (Invalid, Conflict)
//
// An invalid generation whose predecessor stays rendered is not Ready: what
// runs is not what the spec says.
func ReadyCondition(accepted, programmed metav1.Condition) metav1.Condition {
	for _, c := range []metav1.Condition{accepted, programmed} {
		if c.Status != metav1.ConditionTrue {
			return condition(ConditionReady, metav1.ConditionFalse, c.Reason, c.Message)
		}
	}
	return condition(ConditionReady, metav1.ConditionTrue, ReasonReconciled, programmed.Message)
}

func condition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// firstConflict returns the first winner that claims one of c's hosts for pods
// both may select.
func firstConflict(c candidate, winners []candidate) (candidate, string, bool) {
	for _, w := range winners {
		host := sharedHost(c.upstreams, w.upstreams)
		if host != "" && SelectorsMayOverlap(c.selector, w.selector) {
			return w, host, true
		}
	}
	return candidate{}, "", false
}

// sharedHost returns the first host pattern (in a's order) that b also lists.
// Patterns are compared exactly, as the sidecar's policy set does: "api.example"
// and "api.example:8443" are different patterns (the more specific one wins at
// request time), and so are "*.example" and "a.example".
func sharedHost(a, b []v1alpha1.Upstream) string {
	hosts := sets.New[string]()
	for _, u := range b {
		for _, h := range u.Hosts {
			hosts.Insert(strings.ToLower(h))
		}
	}
	for _, u := range a {
		for _, h := range u.Hosts {
			if hosts.Has(strings.ToLower(h)) {
				return h
			}
		}
	}
	return ""
}

// countReady counts ready pods the selector selects; nil or empty selects all.
// An unparsable selector (only possible for an invalid policy) selects none.
func countReady(pods []PodInfo, sel *metav1.LabelSelector) int32 {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return 0
	}
	if sel == nil {
		s = labels.Everything()
	}
	var n int32
	for _, p := range pods {
		if p.Ready && s.Matches(labels.Set(p.Labels)) {
			n++
		}
	}
	return n
}

// SelectorsMayOverlap reports whether some label set could match both
// selectors. It decides statically, from the selectors alone, so a conflict does
// not come and go as pods are created: two policies that could ever select the
// same pod for the same host are in conflict.
//
//	{app: a}                 {app: b}                  no  (one key, two values)
//	{app: a}                 {tier: web}               yes (a pod may carry both)
//	{app In [a,b]}           {app NotIn [a,b]}         no
//	{app Exists}             {app DoesNotExist}        no
//	{}                       anything                  yes (empty selects every pod)
func SelectorsMayOverlap(a, b *metav1.LabelSelector) bool {
	reqs := map[string]*keyRequirement{}
	add := func(sel *metav1.LabelSelector) {
		if sel == nil {
			return
		}
		for k, v := range sel.MatchLabels {
			req(reqs, k).restrict([]string{v})
		}
		for _, e := range sel.MatchExpressions {
			r := req(reqs, e.Key)
			switch e.Operator {
			case metav1.LabelSelectorOpIn:
				r.restrict(e.Values)
			case metav1.LabelSelectorOpNotIn:
				r.notIn = r.notIn.Insert(e.Values...)
			case metav1.LabelSelectorOpExists:
				r.exists = true
			case metav1.LabelSelectorOpDoesNotExist:
				r.notExists = true
			}
		}
	}
	add(a)
	add(b)
	for _, r := range reqs {
		if !r.satisfiable() {
			return false
		}
	}
	return true
}

// keyRequirement is the conjunction of every requirement on one label key.
type keyRequirement struct {
	in        sets.Set[string] // nil: any value
	notIn     sets.Set[string]
	exists    bool
	notExists bool
}

func req(m map[string]*keyRequirement, key string) *keyRequirement {
	r, ok := m[key]
	if !ok {
		r = &keyRequirement{notIn: sets.New[string]()}
		m[key] = r
	}
	return r
}

func (r *keyRequirement) restrict(values []string) {
	if r.in == nil {
		r.in = sets.New(values...)
		return
	}
	r.in = r.in.Intersection(sets.New(values...))
}

func (r *keyRequirement) satisfiable() bool {
	switch {
	case r.notExists:
		return !r.exists && r.in == nil
	case r.in != nil:
		return r.in.Difference(r.notIn).Len() > 0
	default:
		return true // any value outside notIn will do: there are infinitely many
	}
}
