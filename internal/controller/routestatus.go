package controller

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// RouteStatusInput is what the status of one HTTPRoute is computed from.
type RouteStatusInput struct {
	Route *gwv1.HTTPRoute
	// Routes are the cluster's routes with a Service parent (Route may be
	// among them): an older one with the same match wins a tie.
	Routes []gwv1.HTTPRoute
	// Services are the Services that exist.
	Services sets.Set[gatewayroute.NamespacedName]
	// Policies are the cluster's RetryPolicies: one that names a route's
	// host for its callers overrides the route there.
	Policies []v1alpha1.RetryPolicy
}

// RouteParentStatuses is the manager's status.parents entry for each
// Service parent of in.Route, in spec.parentRefs order. Accepted is the first
// that applies of
//
//	the route is invalid (Validate, FromRoute)             False Invalid: the field and why; nothing of it is rendered
//	an older route has a match of equal precedence          True  ShadowedByOlderRoute: both routes and matches named
//	a RetryPolicy upstream of a caller names a host of it   True  OverriddenByRetryPolicy: the policy and the host
//	otherwise                                               True  Accepted
//
// and ResolvedRefs is True (ResolvedRefs) when the Service exists, else False
// (ServiceNotFound, naming the parentRef).
func RouteParentStatuses(in RouteStatusInput) []gwv1.RouteParentStatus {
	rt := in.Route
	parents, _ := gatewayroute.ServiceParents(rt)
	rendered, err := policyset.FromRoute(rt, rt.Namespace, nil)
	var out []gwv1.RouteParentStatus
	for _, p := range parents {
		accepted := routeCondition(gwv1.RouteConditionAccepted, true, v1alpha1.ReasonRouteAccepted,
			fmt.Sprintf("rendered for the callers of Service %s", p.Service))
		if err != nil {
			accepted = routeCondition(gwv1.RouteConditionAccepted, false, v1alpha1.ReasonRouteInvalid, err.Error()+"; nothing of the route is rendered")
		} else if msg := shadowedBy(rt, p, rendered, in.Routes); msg != "" {
			accepted = routeCondition(gwv1.RouteConditionAccepted, true, v1alpha1.ReasonShadowedByOlderRoute, msg)
		} else if msg := overriddenBy(rt, p, in.Policies); msg != "" {
			accepted = routeCondition(gwv1.RouteConditionAccepted, true, v1alpha1.ReasonOverriddenByRetryPolicy, msg)
		}
		resolved := routeCondition(gwv1.RouteConditionResolvedRefs, true, v1alpha1.ReasonRefsResolved,
			fmt.Sprintf("Service %s exists", p.Service))
		if !in.Services.Has(p.Service) {
			resolved = routeCondition(gwv1.RouteConditionResolvedRefs, false, v1alpha1.ReasonServiceNotFound,
				fmt.Sprintf("spec.parentRefs[%d]: Service %s not found", p.Index, p.Service))
		}
		accepted.ObservedGeneration, resolved.ObservedGeneration = rt.Generation, rt.Generation
		out = append(out, gwv1.RouteParentStatus{
			ParentRef:      *rt.Spec.ParentRefs[p.Index].DeepCopy(),
			ControllerName: gwv1.GatewayController(v1alpha1.GatewayControllerName),
			Conditions:     []metav1.Condition{accepted, resolved},
		})
	}
	return out
}

func routeCondition(typ gwv1.RouteConditionType, ok bool, reason v1alpha1.ConditionReason, msg string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: msg}
}

// shadowedBy names the first match of rt's rules for parent p (rendered:
// rt for its own namespace) that an older route gives the same callers
// with the same match: Gateway API gives such requests to the older route.
// Producer routes tie with producer routes, consumer routes with consumer
// routes of their namespace (a consumer route goes before every producer
// route). "" when none.
func shadowedBy(rt *gwv1.HTTPRoute, p gatewayroute.Parent, rendered policyset.Policy, routes []gwv1.HTTPRoute) string {
	mine := ruleMatchesFor(rendered, p, rt.Namespace)
	for i := range routes {
		o := &routes[i]
		if o.UID == rt.UID || o.Namespace != rt.Namespace ||
			compareAge(o.CreationTimestamp.Unix(), o.Namespace+"/"+o.Name, rt.CreationTimestamp.Unix(), rt.Namespace+"/"+rt.Name) >= 0 {
			continue
		}
		other, err := policyset.FromRoute(o, o.Namespace, nil)
		if err != nil {
			continue // an invalid route is not rendered: it shadows nothing
		}
		theirs := ruleMatchesFor(other, p, o.Namespace)
		for _, m := range mine {
			for _, t := range theirs {
				if reflect.DeepEqual(m.match, t.match) {
					return fmt.Sprintf("spec.rules[%d].matches[%d] has the same match as spec.rules[%d].matches[%d] of %s (older) for Service %s: the older route gets those requests",
						m.rule, m.index, t.rule, t.index, describeRoute(o), p.Service)
				}
			}
		}
	}
	return ""
}

// ruleMatch is one match of a rendered route rule.
type ruleMatch struct {
	rule, index int
	match       gatewayroute.RouteMatch
}

// ruleMatchesFor are the matches of the rendered route's rules for parent
// p as callers in ns see it (same Service, same port): a rule without
// matches is Gateway API's default, a PathPrefix "/".
func ruleMatchesFor(rendered policyset.Policy, p gatewayroute.Parent, ns string) []ruleMatch {
	hosts := p.Hosts(ns)
	var out []ruleMatch
	for _, u := range rendered.Upstreams {
		if u.Route == nil || u.Name != gatewayroute.ServiceName(p.Service) || !slices.Equal(u.Hosts, hosts) {
			continue
		}
		ms := u.Route.Matches
		if len(ms) == 0 {
			ms = []gatewayroute.RouteMatch{{PathType: gatewayroute.MatchPathPrefix, Path: "/"}}
		}
		for j, m := range ms {
			out = append(out, ruleMatch{rule: u.Route.Rule, index: j, match: m})
		}
	}
	return out
}

// overriddenBy names the first RetryPolicy (by namespace, then name) of a
// namespace rt applies to whose upstream claims one of the hosts rt gives
// that namespace's callers for parent p: the sidecar gives the RetryPolicy
// those requests (docs/gateway-api.md). "" when none.
func overriddenBy(rt *gwv1.HTTPRoute, p gatewayroute.Parent, policies []v1alpha1.RetryPolicy) string {
	consumer := p.Service.Namespace != rt.Namespace
	ps := slices.Clone(policies)
	slices.SortFunc(ps, func(a, b v1alpha1.RetryPolicy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, pol := range ps {
		if pol.DeletionTimestamp != nil || (consumer && pol.Namespace != rt.Namespace) {
			continue
		}
		hosts := p.Hosts(pol.Namespace)
		for j, u := range pol.Spec.Upstreams {
			for _, h := range u.Hosts {
				for _, rh := range hosts {
					if hostClaims(h, rh) {
						return fmt.Sprintf("RetryPolicy %s/%s spec.upstreams[%d] (%s) claims host %q, which this route gives callers in namespace %s: the RetryPolicy wins there",
							pol.Namespace, pol.Name, j, u.Name, rh, pol.Namespace)
					}
				}
			}
		}
	}
	return ""
}

// mergeParentStatuses sets ours as the manager's entries of
// rt.Status.Parents: every other controller's entry stays as it is and
// where it is, an entry of ours for the same parentRef is replaced in its
// place (a new one is appended, one for a parentRef gone is dropped), and a
// condition that keeps its status keeps its lastTransitionTime. It reports
// whether anything changed.
func mergeParentStatuses(rt *gwv1.HTTPRoute, ours []gwv1.RouteParentStatus) bool {
	want := make(map[string]gwv1.RouteParentStatus, len(ours))
	for _, s := range ours {
		want[parentKey(s.ParentRef)] = s
	}
	withConditions := func(s gwv1.RouteParentStatus, previous []metav1.Condition) gwv1.RouteParentStatus {
		conds := slices.Clone(previous)
		for _, c := range s.Conditions {
			meta.SetStatusCondition(&conds, c)
		}
		s.Conditions = conds
		return s
	}
	var merged []gwv1.RouteParentStatus
	placed := sets.New[string]()
	for _, s := range rt.Status.Parents {
		if s.ControllerName != gwv1.GatewayController(v1alpha1.GatewayControllerName) {
			merged = append(merged, s)
			continue
		}
		key := parentKey(s.ParentRef)
		if w, ok := want[key]; ok && !placed.Has(key) {
			merged = append(merged, withConditions(w, s.Conditions))
			placed.Insert(key)
		}
	}
	for _, s := range ours {
		if !placed.Has(parentKey(s.ParentRef)) {
			merged = append(merged, withConditions(s, nil))
		}
	}
	if equality.Semantic.DeepEqual(merged, rt.Status.Parents) {
		return false
	}
	rt.Status.Parents = merged
	return true
}

// parentKey identifies a parentRef (Gateway API: group, kind, namespace,
// name, section and port).
func parentKey(r gwv1.ParentReference) string {
	return fmt.Sprintf("%v/%v/%v/%s/%v/%v", deref(r.Group), deref(r.Kind), deref(r.Namespace), r.Name, deref(r.SectionName), deref(r.Port))
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
