package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/gatewayroute"
	"github.com/retrydev/retry-operator/internal/policyset"
)

func TestHostClaims(t *testing.T) {
	tests := map[string]struct {
		pattern, host string
		want          bool
	}{
		"the same host":                              {"payments.shop.svc", "payments.shop.svc", true},
		"the same host in another case":              {"Payments.Shop.svc", "payments.shop.svc", true},
		"a host without a port covers every port":    {"payments.shop.svc", "payments.shop.svc:8080", true},
		"a host with a port covers that port only":   {"payments.shop.svc:9090", "payments.shop.svc:8080", false},
		"a host with the route's port":               {"payments.shop.svc:8080", "payments.shop.svc:8080", true},
		"a wildcard covers a name below its suffix":  {"*.shop.svc", "payments.shop.svc", true},
		"a wildcard covers a name with a port":       {"*.shop.svc", "payments.shop.svc:8080", true},
		"a wildcard does not cover its suffix alone": {"*.shop.svc", "shop.svc", false},
		"another host":                               {"orders.shop.svc", "payments.shop.svc", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := hostClaims(tc.pattern, tc.host); got != tc.want {
				t.Fatalf("hostClaims(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
			}
		})
	}
}

// TestBudgetsOf: the older of two policies for one Service wins, and an
// invalid policy names no budget.
func TestBudgetsOf(t *testing.T) {
	bp := func(name string, created int64, percent int) gwxv1a1.XBackendTrafficPolicy {
		return gwxv1a1.XBackendTrafficPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
			Spec: gwxv1a1.BackendTrafficPolicySpec{
				TargetRefs:      []gwxv1a1.LocalPolicyTargetReference{{Group: "", Kind: "Service", Name: "payments"}},
				RetryConstraint: &gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Percent: ptr.To(percent)}},
			}}
	}
	tests := map[string]struct {
		policies    []gwxv1a1.XBackendTrafficPolicy
		wantPercent int32
		wantInvalid []string
	}{
		"one policy":                          {policies: []gwxv1a1.XBackendTrafficPolicy{bp("a", 10, 5)}, wantPercent: 5},
		"the older of two wins":               {policies: []gwxv1a1.XBackendTrafficPolicy{bp("new", 20, 30), bp("old", 10, 7)}, wantPercent: 7},
		"a tie in age goes to the first name": {policies: []gwxv1a1.XBackendTrafficPolicy{bp("b", 10, 30), bp("a", 10, 7)}, wantPercent: 7},
		"an invalid older policy leaves the newer one": {policies: []gwxv1a1.XBackendTrafficPolicy{bp("new", 20, 30), bp("old", 10, 101)}, wantPercent: 30,
			wantInvalid: []string{"XBackendTrafficPolicy shop/old: spec.retryConstraint.budget.percent: Invalid value: 101: must be between 0 and 100"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			budgets, invalid := BudgetsOf(tc.policies)
			var got []string
			for _, err := range invalid {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(tc.wantInvalid, got); diff != "" {
				t.Errorf("invalid (-want +got):\n%s", diff)
			}
			b := budgets[types.NamespacedName{Namespace: "shop", Name: "payments"}]
			if b == nil || *b.RetryPercent != tc.wantPercent {
				t.Fatalf("budget of shop/payments = %+v, want retryPercent %d", b, tc.wantPercent)
			}
		})
	}
}

// TestMergeParentStatuses: the manager's entries replace its earlier ones,
// other controllers' stay as written, and an unchanged condition keeps its
// lastTransitionTime.
func TestMergeParentStatuses(t *testing.T) {
	then := metav1.NewTime(time.Unix(1796083200, 0))
	ref := gwv1.ParentReference{Group: ptr.To(gwv1.Group("")), Kind: ptr.To(gwv1.Kind("Service")), Name: "payments"}
	entry := func(controller string, status metav1.ConditionStatus, reason string, at metav1.Time) gwv1.RouteParentStatus {
		return gwv1.RouteParentStatus{ParentRef: ref, ControllerName: gwv1.GatewayController(controller),
			Conditions: []metav1.Condition{{Type: "Accepted", Status: status, Reason: reason, LastTransitionTime: at}}}
	}
	mesh := entry("example.net/mesh", metav1.ConditionFalse, "Mesh", then)
	tests := map[string]struct {
		have        []gwv1.RouteParentStatus
		ours        gwv1.RouteParentStatus
		wantChanged bool
		want        []string
	}{
		"a first entry is added after the mesh's": {
			have: []gwv1.RouteParentStatus{mesh}, ours: entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "Accepted", metav1.Time{}),
			wantChanged: true, want: []string{"example.net/mesh Accepted False Mesh kept", "retry.dev/retry-operator Accepted True Accepted new"},
		},
		"the same verdict writes nothing": {
			have:        []gwv1.RouteParentStatus{entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "Accepted", then), mesh},
			ours:        entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "Accepted", metav1.Time{}),
			wantChanged: false, want: []string{"retry.dev/retry-operator Accepted True Accepted kept", "example.net/mesh Accepted False Mesh kept"},
		},
		"a new reason with the same status keeps the transition time": {
			have:        []gwv1.RouteParentStatus{mesh, entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "Accepted", then)},
			ours:        entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "OverriddenByRetryPolicy", metav1.Time{}),
			wantChanged: true, want: []string{"example.net/mesh Accepted False Mesh kept", "retry.dev/retry-operator Accepted True OverriddenByRetryPolicy kept"},
		},
		"an entry of ours for a parentRef no longer in the spec is dropped": {
			have: []gwv1.RouteParentStatus{mesh, func() gwv1.RouteParentStatus {
				e := entry(v1alpha1.GatewayControllerName, metav1.ConditionTrue, "Accepted", then)
				e.ParentRef.Name = "gone"
				return e
			}()},
			ours:        entry(v1alpha1.GatewayControllerName, metav1.ConditionFalse, "Invalid", metav1.Time{}),
			wantChanged: true, want: []string{"example.net/mesh Accepted False Mesh kept", "retry.dev/retry-operator Accepted False Invalid new"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rt := &gwv1.HTTPRoute{Status: gwv1.HTTPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: tc.have}}}
			if changed := mergeParentStatuses(rt, []gwv1.RouteParentStatus{tc.ours}); changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			var got []string
			for _, s := range rt.Status.Parents {
				c := s.Conditions[0]
				when := "new"
				if c.LastTransitionTime.Equal(&then) {
					when = "kept"
				}
				got = append(got, fmt.Sprintf("%s %s %s %s %s", s.ControllerName, c.Type, c.Status, c.Reason, when))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("status.parents (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderedRoutes: Compute puts the routes that apply into a namespace
// that renders routes, in version 5 of the document, and none into one
// without a RetryPolicy or an injected pod; an invalid route is left out.
func TestRenderedRoutes(t *testing.T) {
	route := func(ns, name string, codes ...int) gwv1.HTTPRoute {
		r := &gwv1.HTTPRouteRetry{Attempts: ptr.To(2)}
		for _, c := range codes {
			r.Codes = append(r.Codes, gwv1.HTTPRouteRetryStatusCode(c))
		}
		return gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{
				{Group: ptr.To(gwv1.Group("")), Kind: ptr.To(gwv1.Kind("Service")), Name: "payments"}}},
				Rules: []gwv1.HTTPRouteRule{{Retry: r}}}}
	}
	routes := RouteInput{Routes: []gwv1.HTTPRoute{route("shop", "good", 503), route("shop", "bad", 404)}, Budgets: gatewayroute.Budgets{}}
	tests := map[string]struct {
		in   Input
		want []string
	}{
		"a namespace with an injected pod gets the valid producer route": {
			in:   Input{Namespace: "web", Routes: routes, Pods: []PodInfo{{Ready: true}}, Now: time.Unix(1796083200, 0)},
			want: []string{"shop/good service/shop/payments [payments.shop payments.shop.svc payments.shop.svc.cluster.local]"},
		},
		"a namespace without a policy or an injected pod gets nothing": {
			in: Input{Namespace: "idle", Routes: routes, Now: time.Unix(1796083200, 0)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range out.Document.Policies {
				for _, u := range p.Upstreams {
					got = append(got, fmt.Sprintf("%s/%s %s %v", p.Namespace, p.Name, u.Name, u.Hosts))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("rendered (-want +got):\n%s", diff)
			}
			if tc.want != nil {
				doc, err := policyset.Unmarshal(out.Data)
				if err != nil || doc.Version != policyset.RouteWrittenVersion {
					t.Fatalf("a document with routes read as version %d (%v), want %d", doc.Version, err, policyset.RouteWrittenVersion)
				}
			}
			if tc.want == nil && out.Data != nil {
				t.Fatalf("a document without policies was encoded:\n%s", out.Data)
			}
		})
	}
}

// TestRouteParentStatusesAccepted: which Accepted reason a route gets
// beside the others (the envtest TestGatewayRoutes has the messages).
func TestRouteParentStatusesAccepted(t *testing.T) {
	svc := gwv1.ParentReference{Group: ptr.To(gwv1.Group("")), Kind: ptr.To(gwv1.Kind("Service")), Name: "payments"}
	consumerRef := *svc.DeepCopy()
	consumerRef.Namespace = ptr.To(gwv1.Namespace("shop"))
	mk := func(ns, name string, created int64, parent gwv1.ParentReference, path string, codes ...int) gwv1.HTTPRoute {
		r := &gwv1.HTTPRouteRetry{Attempts: ptr.To(2)}
		for _, c := range codes {
			r.Codes = append(r.Codes, gwv1.HTTPRouteRetryStatusCode(c))
		}
		rule := gwv1.HTTPRouteRule{Retry: r}
		if path != "" {
			rule.Matches = []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Value: ptr.To(path)}}}
		}
		return gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
			Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
				Rules: []gwv1.HTTPRouteRule{rule}}}
	}
	newer := mk("shop", "newer", 20, svc, "/api", 503)
	tests := map[string]struct {
		route    gwv1.HTTPRoute
		others   []gwv1.HTTPRoute
		policies []v1alpha1.RetryPolicy
		want     string
	}{
		"an older route with another path leaves it Accepted":            {route: newer, others: []gwv1.HTTPRoute{mk("shop", "older", 10, svc, "/other", 503)}, want: "Accepted"},
		"an older route with the same path shadows it":                   {route: newer, others: []gwv1.HTTPRoute{mk("shop", "older", 10, svc, "/api", 502)}, want: "ShadowedByOlderRoute"},
		"a newer route with the same path does not shadow it":            {route: newer, others: []gwv1.HTTPRoute{mk("shop", "newest", 30, svc, "/api", 502)}, want: "Accepted"},
		"an invalid older route with the same path shadows nothing":      {route: newer, others: []gwv1.HTTPRoute{mk("shop", "older", 10, svc, "/api", 404)}, want: "Accepted"},
		"a consumer route with the same path does not shadow a producer": {route: newer, others: []gwv1.HTTPRoute{mk("web", "older", 10, consumerRef, "/api", 503)}, want: "Accepted"},
		"a RetryPolicy of a caller namespace naming the host overrides it": {route: newer, want: "OverriddenByRetryPolicy",
			policies: []v1alpha1.RetryPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"},
				Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "u", Hosts: []string{"payments.shop"}}}}}}},
		"a RetryPolicy naming the short name in another namespace does not": {route: newer, want: "Accepted",
			policies: []v1alpha1.RetryPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"},
				Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "u", Hosts: []string{"payments"}}}}}}},
		"an invalid route is Invalid whatever else holds": {route: mk("shop", "bad", 20, svc, "/api", 404),
			others: []gwv1.HTTPRoute{mk("shop", "older", 10, svc, "/api", 503)}, want: "Invalid"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := RouteParentStatuses(RouteStatusInput{Route: &tc.route, Routes: append(tc.others, tc.route), Policies: tc.policies,
				Services: sets.New(types.NamespacedName{Namespace: "shop", Name: "payments"})})
			if len(got) != 1 || got[0].Conditions[0].Reason != tc.want {
				t.Fatalf("status.parents = %+v, want one entry with Accepted reason %s", got, tc.want)
			}
		})
	}
}
