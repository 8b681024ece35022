package controller

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// Input is everything the reconciler gathers for one namespace.
type Input struct {
	// Namespace is the namespace rendered: the callers the routes apply to.
	Namespace string
	// Routes are the Gateway API routes and budgets of the cluster
	// (routes.go); rendered only where RendersRoutes.
	Routes RouteInput
	// Policies are the RetryPolicies of the namespace, in any order.
	Policies []v1alpha1.RetryPolicy
	// Pods are the injected pods of the namespace (the label the injector sets).
	Pods []PodInfo
	// Previous is the document currently in the ConfigMap (zero if none or
	// unreadable): what an unchanged rendering is compared with, and a revision
	// the next one must exceed. A policy's own status.lastAccepted is the source
	// of its last accepted rendering; Previous stands in only for a policy
	// without one (status written by an older manager).
	Previous policyset.Document
	// ConfigMaps are the data of the namespace's ConfigMaps that policies name in
	// tls.caCertificateRefs, by name; a name absent from the map does not exist
	// (or is in CAUnread). Only the key ca.crt matters.
	ConfigMaps map[string]map[string]string
	// CAUnread are the ConfigMaps named in tls.caCertificateRefs that were not
	// read because those read before them (oldest policy first) already hold
	// v1alpha1.MaxNamespaceCABytes; the policies naming them are InvalidRef.
	CAUnread sets.Set[string]
	// Now is the reconcile's clock reading: a changed rendering gets revision
	// policyset.NextRevision(previous, Now).
	Now time.Time
	// Quotas are the SharedQuotas the policies name in quotaRef, by name; a
	// name absent from the map does not exist.
	Quotas map[string]*v1alpha1.SharedQuota
	// NamespaceLabels are the labels of the namespace, which a quota's
	// consumers.namespaceSelector is matched against.
	NamespaceLabels map[string]string
	// Lease is the manager's lease endpoint, which every rendered quota names
	// (docs/quota.md#trust).
	Lease policyset.QuotaLease
}

// PodInfo is what rate sharing and status.programmedPods need to know about a
// pod.
type PodInfo struct {
	Labels map[string]string
	Ready  bool
	// Revision is the policies.json revision its sidecar reports in force, 0
	// when unknown.
	Revision int64
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
	// ProgrammedPods counts those whose sidecar runs the rendered generation:
	// it reports a revision at or after LastAccepted.Revision.
	ProgrammedPods int32
	// RenderedGeneration is the generation in the ConfigMap, 0 when not rendered.
	RenderedGeneration int64
	// LastAccepted is the desired status.lastAccepted (nil: none yet).
	LastAccepted *v1alpha1.AcceptedRendering
}

// candidate is a policy competing for its hosts: either its current generation
// (valid) or, when that is invalid, its last accepted rendering.
type candidate struct {
	policy   *v1alpha1.RetryPolicy
	selector *metav1.LabelSelector
	// upstreams as rendered: defaults applied (not yet the pod share), and the
	// resolved CA bundle of each (policyset.ResolveCABundles).
	upstreams  []v1alpha1.Upstream
	bundles    []string
	generation int64
	valid      bool
	// revision of the kept rendering (invalid candidates), 0 for a new one.
	revision int64
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
//
// A policy whose tls.caCertificateRefs do not resolve (a ConfigMap or its key
// ca.crt missing, no PEM certificate in it) is treated as an invalid one, with
// reason InvalidRef: its last accepted rendering stays in force. So is a
// policy whose quotaRef names no SharedQuota (InvalidRef), or one that does
// not admit the namespace (QuotaNotAllowed); a kept rendering keeps the quota
// as last rendered (docs/quota.md), and is dropped when there is none.
//
// The steps: validatePolicies, resolveConflicts (oldest first), render, and
// statuses.
func Compute(in Input) (Output, error) {
	cands, accepted := validatePolicies(in)
	winners := resolveConflicts(cands, accepted)
	out, err := render(in, winners)
	if err != nil {
		return Output{}, err
	}
	out.Status = statuses(in, accepted, winners, out)
	return out, nil
}

// validatePolicies validates every policy not being deleted. A valid one
// becomes a candidate for its hosts; an invalid one gets Accepted False, and its
// last accepted rendering, if it has one, competes in its place.
func validatePolicies(in Input) ([]candidate, map[string]metav1.Condition) {
	previous := make(map[string]policyset.Policy, len(in.Previous.Policies))
	for _, p := range withoutRoutes(in.Previous.Policies) {
		previous[p.Name] = p
	}
	var cands []candidate
	accepted := map[string]metav1.Condition{}
	caBytes := 0 // of the policies before p, which MaxNamespaceCABytes bounds
	for _, p := range oldestFirst(in.Policies) {
		if p.DeletionTimestamp != nil {
			continue // on its way out: neither rendered nor given a status
		}
		bundles, errs, reason := validatePolicy(p, in, caBytes)
		if len(errs) > 0 {
			msg := errs.ToAggregate().Error()
			if kept, ok := lastAccepted(p, previous); ok && keptQuotasRenderable(kept, in) {
				msg = fmt.Sprintf("%s; generation %d, the last accepted, stays in force", msg, kept.generation)
				cands = append(cands, kept)
			}
			accepted[p.Name] = condition(v1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, msg)
			continue
		}
		caBytes += bundleBytes(bundles)
		cands = append(cands, candidate{policy: p, selector: p.Spec.PodSelector, upstreams: p.Spec.Upstreams, bundles: bundles, generation: p.Generation, valid: true})
	}
	return cands, accepted
}

// validatePolicy validates p, then resolves its tls.caCertificateRefs against
// configMaps (the CA bundle of each upstream), within what caBytes (the
// bundles of older policies) leaves of v1alpha1.MaxNamespaceCABytes. The
// reason names the step that failed: ReasonInvalid for the spec,
// ReasonInvalidRef for a reference.
func validatePolicy(p *v1alpha1.RetryPolicy, in Input, caBytes int) ([]string, field.ErrorList, v1alpha1.ConditionReason) {
	if errs := v1alpha1.Validate(p); len(errs) > 0 {
		return nil, errs, v1alpha1.ReasonInvalid
	}
	if errs := unreadCARefs(p, in.CAUnread); len(errs) > 0 {
		return nil, errs, v1alpha1.ReasonInvalidRef
	}
	bundles, errs := policyset.ResolveCABundles(p, policyset.MapLookup(in.ConfigMaps, ""))
	if len(errs) == 0 {
		errs = overCABudget(p, bundles, caBytes)
	}
	if len(errs) > 0 {
		return nil, errs, v1alpha1.ReasonInvalidRef
	}
	errs, reason := checkQuotaRefs(p, in)
	return bundles, errs, reason
}

// resolveConflicts returns the candidates that win their hosts, oldest first,
// and records in accepted the verdict on each valid candidate: Valid for a
// winner, Conflict naming the older policy that claims a shared host for pods
// both may select. (An invalid candidate's Accepted is already False.)
func resolveConflicts(cands []candidate, accepted map[string]metav1.Condition) []candidate {
	sortOldestFirst(cands)
	var winners []candidate
	for _, c := range cands {
		if w, host, lost := firstConflict(c, winners); lost {
			if c.valid {
				accepted[c.policy.Name] = condition(v1alpha1.ConditionAccepted, metav1.ConditionFalse, v1alpha1.ReasonConflict,
					fmt.Sprintf("host %q is already claimed by RetryPolicy %q (older) for pods both policies select; the older policy wins", host, w.policy.Name))
			}
			continue
		}
		winners = append(winners, c)
		if c.valid {
			accepted[c.policy.Name] = condition(v1alpha1.ConditionAccepted, metav1.ConditionTrue, v1alpha1.ReasonValid,
				fmt.Sprintf("%d upstream(s) accepted", len(c.upstreams)))
		}
	}
	return winners
}

// sortOldestFirst orders the candidates as conflicts are decided: the older
// policy wins. creationTimestamp, then name, is an order every replica of the
// controller agrees on and that a new policy cannot jump.
func sortOldestFirst(cands []candidate) {
	sort.Slice(cands, func(i, j int) bool { return older(cands[i].policy, cands[j].policy) })
}

// oldestFirst are pointers to policies, the oldest first (ties by name).
func oldestFirst(policies []v1alpha1.RetryPolicy) []*v1alpha1.RetryPolicy {
	out := make([]*v1alpha1.RetryPolicy, len(policies))
	for i := range policies {
		out[i] = &policies[i]
	}
	sort.Slice(out, func(i, j int) bool { return older(out[i], out[j]) })
	return out
}

// older reports whether a was created before b (by name when at the same
// second).
func older(a, b *v1alpha1.RetryPolicy) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// render builds the document the ConfigMap must hold, one policy per winner in
// their order, then one per route that applies (routes.go), and its encoding and hash (none when nothing is rendered). The
// Status of the result is left for statuses.
func render(in Input, winners []candidate) (Output, error) {
	out := Output{UIDs: map[string]types.UID{}}
	for _, w := range winners {
		rp, err := renderPolicy(w, countReady(in.Pods, w.selector))
		if err != nil {
			return Output{}, err
		}
		out.Document.Policies = append(out.Document.Policies, rp)
		out.UIDs[w.policy.Name] = w.policy.UID
	}
	if RendersRoutes(len(in.Policies), len(in.Pods)) {
		out.Document.Policies = append(out.Document.Policies, routePolicies(in.Namespace, in.Routes)...)
	}
	out.Document.Version = policyset.DocumentVersion
	out.Document.Quotas = renderQuotas(in, out.Document.Policies)
	if len(out.Document.Policies) > 0 {
		data, err := renderDocument(&out.Document, in)
		if err != nil {
			return Output{}, err
		}
		out.Data, out.Hash = data, policyset.Hash(data)
	}
	return out, nil
}

// renderPolicy is the document's entry for the candidate w: its upstreams with
// defaults applied, the share of the given number of ready pods, and their CA
// bundles. Its upstreams are valid, so rendering them fails only on a bug.
func renderPolicy(w candidate, pods int32) (policyset.Policy, error) {
	rp := policyset.Policy{Namespace: w.policy.Namespace, Name: w.policy.Name, Generation: w.generation, PodSelector: w.selector.DeepCopy()}
	for j, u := range w.upstreams {
		cu, err := policyset.RenderUpstream(u, pods)
		if err != nil {
			return policyset.Policy{}, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", w.policy.Namespace, w.policy.Name, j, err)
		}
		if j < len(w.bundles) {
			cu.CABundle = w.bundles[j]
		}
		rp.Upstreams = append(rp.Upstreams, cu)
	}
	return rp, nil
}

// statuses derives the status of every policy that has an Accepted verdict
// from the verdicts, the winners and the rendered output.
func statuses(in Input, accepted map[string]metav1.Condition, winners []candidate, out Output) map[string]PolicyStatus {
	selected := selectedPods(in, winners)
	lastAcc := lastAcceptedRenderings(in.Policies, winners, out.Document.Revision)
	rendered := make(map[string]candidate, len(winners))
	for _, w := range winners {
		rendered[w.policy.Name] = w
	}
	upstreams := make(map[string]int32, len(in.Policies))
	for i := range in.Policies {
		upstreams[in.Policies[i].Name] = int32(len(in.Policies[i].Spec.Upstreams))
	}
	status := make(map[string]PolicyStatus, len(in.Policies))
	for name, acc := range accepted {
		st := PolicyStatus{Accepted: acc, UpstreamCount: upstreams[name], SelectedPods: selected[name], LastAccepted: lastAcc[name]}
		if w, ok := rendered[name]; ok {
			st.RenderedGeneration = w.generation
			st.ProgrammedPods = countProgrammed(in.Pods, w.selector, lastAcc[name].Revision)
			st.Programmed = condition(v1alpha1.ConditionProgrammed, metav1.ConditionTrue, v1alpha1.ReasonRendered,
				fmt.Sprintf("%d/%d pods run generation %d (ConfigMap %s revision %d, %s)", st.ProgrammedPods, st.SelectedPods,
					w.generation, v1alpha1.PoliciesConfigMapName, out.Document.Revision, out.Hash))
		} else {
			st.Programmed = condition(v1alpha1.ConditionProgrammed, metav1.ConditionFalse, v1alpha1.ReasonNotRendered,
				fmt.Sprintf("not in ConfigMap %s: Accepted is False (%s)", v1alpha1.PoliciesConfigMapName, acc.Reason))
		}
		st.Ready = ReadyCondition(st.Accepted, st.Programmed)
		status[name] = st
	}
	return status
}

// selectedPods counts, for each policy not being deleted, the ready pods its
// selector in force selects: the spec's, or the rendered one for an invalid
// policy whose earlier generation stays rendered.
func selectedPods(in Input, winners []candidate) map[string]int32 {
	selected := map[string]int32{}
	for i := range in.Policies {
		p := &in.Policies[i]
		if p.DeletionTimestamp == nil {
			selected[p.Name] = countReady(in.Pods, p.Spec.PodSelector)
		}
	}
	for _, w := range winners {
		if !w.valid {
			selected[w.policy.Name] = countReady(in.Pods, w.selector)
		}
	}
	return selected
}

// lastAcceptedRenderings is what each policy's status.lastAccepted must say: a
// rendered generation (winner) replaces it, anything else leaves it as it is.
// revision is the document's.
func lastAcceptedRenderings(policies []v1alpha1.RetryPolicy, winners []candidate, revision int64) map[string]*v1alpha1.AcceptedRendering {
	lastAcc := map[string]*v1alpha1.AcceptedRendering{}
	for i := range policies {
		if la := policies[i].Status.LastAccepted; la != nil {
			lastAcc[policies[i].Name] = la.DeepCopy()
		}
	}
	for _, w := range winners {
		la := &v1alpha1.AcceptedRendering{Generation: w.generation, Revision: acceptedRevision(w, revision), PodSelector: w.selector.DeepCopy()}
		for _, u := range w.upstreams {
			la.Upstreams = append(la.Upstreams, policyset.Defaulted(u))
		}
		lastAcc[w.policy.Name] = la
	}
	return lastAcc
}

// acceptedRevision is the revision status.lastAccepted records for the rendered
// candidate w when the document has revision current: the first rule that
// applies of
//
//	status.lastAccepted has w's generation, revision in 1..current  that revision (kept while the generation is the same)
//	w is a kept rendering (invalid policy) with a revision            w.revision
//	otherwise (a new generation)                                      current
func acceptedRevision(w candidate, current int64) int64 {
	if la := w.policy.Status.LastAccepted; la != nil && la.Generation == w.generation && la.Revision > 0 && la.Revision <= current {
		return la.Revision
	}
	if !w.valid && w.revision > 0 {
		return w.revision
	}
	return current
}

// lastAccepted is the kept rendering of an invalid policy: its
// status.lastAccepted, or for a policy without one (status written by an older
// manager) its entry in the ConfigMap.
//
// The CA bundles of a kept rendering (tls.caCertificateRefs) come from the
// ConfigMap's entry of that generation: the referenced ConfigMaps may be the
// very thing that went missing.
func lastAccepted(p *v1alpha1.RetryPolicy, previous map[string]policyset.Policy) (candidate, bool) {
	prev, hasPrev := previous[p.Name]
	if la := p.Status.LastAccepted; la != nil {
		c := candidate{policy: p, selector: la.PodSelector, upstreams: la.Upstreams, generation: la.Generation, revision: la.Revision}
		if hasPrev && prev.Generation == la.Generation {
			c.bundles = previousBundles(prev)
		}
		return c, true
	}
	if !hasPrev {
		return candidate{}, false
	}
	ups := make([]v1alpha1.Upstream, len(prev.Upstreams))
	for j := range prev.Upstreams {
		ups[j] = *prev.Upstreams[j].API()
	}
	return candidate{policy: p, selector: prev.PodSelector, upstreams: ups, bundles: previousBundles(prev), generation: prev.Generation}, true
}

func previousBundles(prev policyset.Policy) []string {
	bundles := make([]string, len(prev.Upstreams))
	for j := range prev.Upstreams {
		bundles[j] = prev.Upstreams[j].CABundle
	}
	return bundles
}

// renderDocument encodes doc with the revision of the previous rendering when the
// content is the same (no write follows), else with the next revision.
//
// The revision to exceed is the highest one known: the ConfigMap's, or, when
// the ConfigMap is lost, the highest a policy's status.lastAccepted recorded.
func renderDocument(doc *policyset.Document, in Input) ([]byte, error) {
	prev := in.Previous.Revision
	for i := range in.Policies {
		if la := in.Policies[i].Status.LastAccepted; la != nil {
			prev = max(prev, la.Revision)
		}
	}
	doc.Revision = in.Previous.Revision
	data, err := policyset.Marshal(*doc)
	if err != nil {
		return nil, err
	}
	if len(in.Previous.Policies) > 0 {
		old, err := policyset.Marshal(in.Previous)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(old, data) {
			return data, nil
		}
	}
	doc.Revision = policyset.NextRevision(prev, in.Now)
	return policyset.Marshal(*doc)
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
			return condition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ConditionReason(c.Reason), c.Message)
		}
	}
	return condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonReconciled, programmed.Message)
}

func condition(typ v1alpha1.ConditionType, status metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) metav1.Condition {
	return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: msg}
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

// countProgrammed counts ready selected pods whose sidecar reports revision
// rev or later.
func countProgrammed(pods []PodInfo, sel *metav1.LabelSelector, rev int64) int32 {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || rev <= 0 {
		return 0
	}
	if sel == nil {
		s = labels.Everything()
	}
	var n int32
	for _, p := range pods {
		if p.Ready && p.Revision >= rev && s.Matches(labels.Set(p.Labels)) {
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
