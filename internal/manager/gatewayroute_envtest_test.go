package manager

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/controller"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// gatewayCRDs are the experimental-channel CRDs of the Gateway API module
// in go.mod that the manager reads (docs/gateway-api.md), read from the
// module cache.
func gatewayCRDs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("locating sigs.k8s.io/gateway-api: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental")
	return []string{
		filepath.Join(dir, "gateway.networking.k8s.io_httproutes.yaml"),
		filepath.Join(dir, "gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml"),
	}
}

// startRouteManager starts an API server with the given extra CRDs and the
// manager's controllers (no webhooks) with the rights of config/rbac, and
// returns a direct client.
func startRouteManager(t *testing.T, crds []string) client.Client {
	t.Helper()
	logs := io.Discard
	if os.Getenv("TEST_LOG") != "" {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logs)))
	cfg := testenv.Start(t, &envtest.Environment{CRDDirectoryPaths: crds})
	admin, err := client.New(cfg, client.Options{Scheme: Scheme()})
	must(t, err)
	must(t, admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))
	must(t, admin.Create(context.Background(), testenv.SidecarClusterRole(t, controller.DefaultSidecarClusterRole)))
	opts := Options(ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	mgr, err := ctrl.NewManager(testenv.ManagerConfig(t, cfg, operatorNamespace), opts)
	must(t, err)
	_, err = Setup(mgr, SetupOptions{MaxConcurrentReconciles: 4, OperatorNamespace: operatorNamespace,
		SidecarConfigURL: func(*corev1.Pod) string { return "http://127.0.0.1:1/config" }})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return admin
}

// routeCell is one scenario: objects created in order, in namespaces of
// its own (prefix), then what the ConfigMaps hold of the cell's routes and
// what the routes' status says.
type routeCell struct {
	prefix  string
	objects func(ns func(string) string) []client.Object
	// rendered: per namespace (without the prefix), a line per route
	// upstream of the cell's routes in its policies.json; a namespace absent
	// here renders none of them.
	rendered map[string][]string
	// status: per route ("namespace/name", without the prefix), a line per
	// condition of the manager's status.parents entries.
	status map[string][]string
}

// TestGatewayRoutes: HTTPRoutes with a Service parent and
// XBackendTrafficPolicies in a cluster that serves their CRDs are rendered
// into the namespaces they apply to, and each route's status.parents says
// whether and why (docs/gateway-api.md#in-the-cluster-the-manager-and-route-status).
func TestGatewayRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	c := startRouteManager(t, gatewayCRDs(t))
	cells := placementCells()
	maps.Copy(cells, statusCells())
	for name, tc := range cells {
		t.Run(name, func(t *testing.T) { tc.run(t, c) })
	}
}

// placementCells: where routes and budgets are rendered.
func placementCells() map[string]routeCell {
	return map[string]routeCell{
		"a producer route is rendered into every namespace with a RetryPolicy or an injected pod, with the short name only in its own": {
			prefix: "prod",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), namespaceObj(ns("web")), namespaceObj(ns("idle")),
					service(ns("shop"), "payments"), rp(ns("shop"), "own", "own.example"),
					injectedPod(ns("web"), "app"),
					route(ns("shop"), "retries", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})}
			},
			rendered: map[string][]string{
				"shop": {"shop/retries service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3"},
				"web":  {"shop/retries service/shop/payments [payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3"},
			},
			status: map[string][]string{"shop/retries": {
				"payments: Accepted True Accepted: rendered for the callers of Service shop/payments",
				"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"}},
		},
		"a consumer route is rendered into its own namespace only": {
			prefix: "cons",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), namespaceObj(ns("web")), namespaceObj(ns("other")),
					service(ns("shop"), "payments"), rp(ns("shop"), "own", "own.example"), rp(ns("web"), "own", "own.example"),
					rp(ns("other"), "own", "own.example"),
					route(ns("web"), "mine", parentRef(ns("shop"), "payments"), gwv1.HTTPRouteRule{Retry: retry(1, 502)})}
			},
			rendered: map[string][]string{
				"web": {"web/mine service/shop/payments [payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 2"},
			},
			status: map[string][]string{"web/mine": {
				"payments: Accepted True Accepted: rendered for the callers of Service shop/payments",
				"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"}},
		},
		"an XBackendTrafficPolicy's retryConstraint is the retry budget of the Service's route rules": {
			prefix: "budget",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), service(ns("shop"), "payments"), rp(ns("shop"), "own", "own.example"),
					budget(ns("shop"), "payments", 5),
					route(ns("shop"), "retries", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})}
			},
			rendered: map[string][]string{
				"shop": {"shop/retries service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3 budget 5%"},
			},
			status: map[string][]string{"shop/retries": {
				"payments: Accepted True Accepted: rendered for the callers of Service shop/payments",
				"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"}},
		},
	}
}

// statusCells: what a route's status says, and what of it is rendered.
func statusCells() map[string]routeCell {
	return map[string]routeCell{
		"an invalid route is Accepted False naming the field and not rendered; the other route stays rendered": {
			prefix: "invalid",
			objects: func(ns func(string) string) []client.Object {
				bad := gwv1.HTTPRouteRule{Retry: retry(2, 503), Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{
					Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To("/a(")}}}}
				return []client.Object{namespaceObj(ns("shop")), service(ns("shop"), "payments"), rp(ns("shop"), "own", "own.example"),
					route(ns("shop"), "good", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)}),
					route(ns("shop"), "bad", parentRef("", "payments"), bad)}
			},
			rendered: map[string][]string{
				"shop": {"shop/good service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3"},
			},
			status: map[string][]string{
				"shop/good": {
					"payments: Accepted True Accepted: rendered for the callers of Service shop/payments",
					"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"},
				"shop/bad": {
					"payments: Accepted False Invalid: HTTPRoute shop/bad: spec.rules[0].matches[0].path.value: Invalid value: \"/a(\": does not compile: error parsing regexp: missing closing ): `^(?:/a()$`; nothing of the route is rendered",
					"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"},
			},
		},
		"a parent Service that does not exist is ResolvedRefs False ServiceNotFound naming the parentRef; the route is rendered all the same": {
			prefix: "missing",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), rp(ns("shop"), "own", "own.example"),
					route(ns("shop"), "retries", parentRef("", "gone"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})}
			},
			rendered: map[string][]string{
				"shop": {"shop/retries service/shop/gone [gone gone.shop gone.shop.svc gone.shop.svc.cluster.local] rule 0 attempts 3"},
			},
			status: map[string][]string{"shop/retries": {
				"gone: Accepted True Accepted: rendered for the callers of Service shop/gone",
				"gone: ResolvedRefs False ServiceNotFound: spec.parentRefs[0]: Service shop/gone not found"}},
		},
		"a RetryPolicy upstream naming a host of the route overrides it there, and the route names the policy": {
			prefix: "override",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), service(ns("shop"), "payments"),
					rp(ns("shop"), "mine", "payments."+ns("shop")+".svc"),
					route(ns("shop"), "retries", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})}
			},
			rendered: map[string][]string{
				"shop": {"shop/retries service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3"},
			},
			status: map[string][]string{"shop/retries": {
				"payments: Accepted True OverriddenByRetryPolicy: RetryPolicy shop/mine spec.upstreams[0] (u) claims host \"payments.shop.svc\", which this route gives callers in namespace shop: the RetryPolicy wins there",
				"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"}},
		},
		"of two routes with the same match for one Service the older wins, and the newer says so": {
			prefix: "tie",
			objects: func(ns func(string) string) []client.Object {
				return []client.Object{namespaceObj(ns("shop")), service(ns("shop"), "payments"), rp(ns("shop"), "own", "own.example"),
					route(ns("shop"), "a", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)}),
					route(ns("shop"), "b", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(4, 503)})}
			},
			rendered: map[string][]string{
				"shop": {
					"shop/a service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3",
					"shop/b service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 5"},
			},
			status: map[string][]string{
				"shop/a": {
					"payments: Accepted True Accepted: rendered for the callers of Service shop/payments",
					"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"},
				"shop/b": {
					"payments: Accepted True ShadowedByOlderRoute: spec.rules[0].matches[0] has the same match as spec.rules[0].matches[0] of HTTPRoute shop/a (older) for Service shop/payments: the older route gets those requests",
					"payments: ResolvedRefs True ResolvedRefs: Service shop/payments exists"},
			},
		},
	}
}

// run creates the cell's objects and waits for its renderings and status.
func (tc routeCell) run(t *testing.T, c client.Client) {
	ns := func(s string) string { return tc.prefix + "-" + s }
	for _, o := range tc.objects(ns) {
		must(t, c.Create(context.Background(), o))
	}
	unprefix := strings.NewReplacer(tc.prefix+"-", "")
	polltest.Until(t, 30*time.Second, func() error {
		return diffRendered(c, tc.prefix, unprefix, tc.rendered, tc.objects(ns))
	})
	polltest.Until(t, 30*time.Second, func() error {
		for key, want := range tc.status {
			nsName, name, _ := strings.Cut(key, "/")
			got, err := routeStatusLines(c, ns(nsName), name, unprefix)
			if err != nil {
				return err
			}
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Errorf("status of HTTPRoute %s (-want +got):\n%s", key, diff)
			}
		}
		return nil
	})
}

// diffRendered compares the route lines of the cell's routes in every
// namespace of the cell with want.
func diffRendered(c client.Client, prefix string, unprefix *strings.Replacer, want map[string][]string, objects []client.Object) error {
	for _, o := range objects {
		nsObj, ok := o.(*corev1.Namespace)
		if !ok {
			continue
		}
		short := unprefix.Replace(nsObj.Name)
		var cm corev1.ConfigMap
		err := c.Get(context.Background(), types.NamespacedName{Namespace: nsObj.Name, Name: v1alpha1.PoliciesConfigMapName}, &cm)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		var got []string
		if err == nil {
			doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
			if err != nil {
				return err
			}
			if len(routeLines(doc, prefix)) > 0 && doc.Version != policyset.RouteWrittenVersion {
				return fmt.Errorf("namespace %s: a document with routes in version %d, want %d", short, doc.Version, policyset.RouteWrittenVersion)
			}
			for _, l := range routeLines(doc, prefix) {
				got = append(got, unprefix.Replace(l))
			}
		}
		if diff := cmp.Diff(want[short], got); diff != "" {
			return fmt.Errorf("routes rendered in namespace %s (-want +got):\n%s", short, diff)
		}
	}
	return nil
}

// routeLines are the route upstreams of doc whose route is in a namespace
// with prefix: "namespace/route upstream [hosts] rule N attempts N [budget N%]".
func routeLines(doc policyset.Document, prefix string) []string {
	var out []string
	for _, p := range doc.Policies {
		for _, u := range p.Upstreams {
			if u.Route == nil || !strings.HasPrefix(p.Namespace, prefix+"-") {
				continue
			}
			line := fmt.Sprintf("%s/%s %s %v rule %d attempts %d", p.Namespace, p.Name, u.Name, u.Hosts, u.Route.Rule, *u.MaxAttempts)
			if u.Budget != nil && u.Budget.RetryPercent != nil && *u.Budget.RetryPercent != 20 {
				line += fmt.Sprintf(" budget %d%%", *u.Budget.RetryPercent)
			}
			out = append(out, line)
		}
	}
	return out
}

// routeStatusLines are the conditions of the manager's status.parents
// entries of a route, "parent: Type Status Reason: message"; an entry of
// another controller is an error if it is not kept as written
// (foreignParent).
func routeStatusLines(c client.Client, ns, name string, unprefix *strings.Replacer) ([]string, error) {
	var rt gwv1.HTTPRoute
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &rt); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range rt.Status.Parents {
		if s.ControllerName != v1alpha1.GatewayControllerName {
			continue
		}
		for _, cond := range s.Conditions {
			if cond.ObservedGeneration != rt.Generation {
				return nil, fmt.Errorf("condition %s of generation %d, want %d", cond.Type, cond.ObservedGeneration, rt.Generation)
			}
			out = append(out, unprefix.Replace(fmt.Sprintf("%s: %s %s %s: %s", s.ParentRef.Name, cond.Type, cond.Status, cond.Reason, cond.Message)))
		}
	}
	return out, nil
}

// TestRouteStatusKeepsOtherControllersEntries: the manager merges its
// status.parents entries by controllerName: a mesh's entry for the same
// route survives every write of the manager.
func TestRouteStatusKeepsOtherControllersEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	c := startRouteManager(t, gatewayCRDs(t))
	ctx := context.Background()
	must(t, c.Create(ctx, namespaceObj("mesh")))
	must(t, c.Create(ctx, service("mesh", "payments")))
	rt := route("mesh", "retries", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})
	must(t, c.Create(ctx, rt))
	foreign := gwv1.RouteParentStatus{ParentRef: parentRef("", "payments"), ControllerName: "example.net/mesh",
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "the mesh's",
			LastTransitionTime: metav1.NewTime(time.Unix(1796083200, 0))}}}
	polltest.Until(t, 10*time.Second, func() error { // a conflict with the manager's write: try again
		var cur gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), &cur); err != nil {
			return err
		}
		cur.Status.Parents = append(cur.Status.Parents, foreign)
		return c.Status().Update(ctx, &cur)
	})
	// A spec change makes the manager write its entry again.
	polltest.Until(t, 10*time.Second, func() error {
		var cur gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), &cur); err != nil {
			return err
		}
		cur.Spec.Rules[0].Retry.Attempts = ptr.To(3)
		return c.Update(ctx, &cur)
	})
	polltest.Until(t, 20*time.Second, func() error {
		var cur gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), &cur); err != nil {
			return err
		}
		var controllers []string
		for _, s := range cur.Status.Parents {
			controllers = append(controllers, string(s.ControllerName))
			if s.ControllerName == foreign.ControllerName && !cmp.Equal(s, foreign) {
				return fmt.Errorf("the mesh's entry changed: %s", cmp.Diff(foreign, s))
			}
			if s.ControllerName == v1alpha1.GatewayControllerName && s.Conditions[0].ObservedGeneration != cur.Generation {
				return fmt.Errorf("the manager's entry is of generation %d, want %d", s.Conditions[0].ObservedGeneration, cur.Generation)
			}
		}
		slices.Sort(controllers)
		if want := []string{"example.net/mesh", v1alpha1.GatewayControllerName}; !slices.Equal(controllers, want) {
			return fmt.Errorf("status.parents of %v, want %v", controllers, want)
		}
		return nil
	})
}

// TestAClusterWithoutGatewayAPIRendersRetryPolicies: without the Gateway
// API CRDs the manager starts, watches no route, and renders RetryPolicies
// as ever.
func TestAClusterWithoutGatewayAPIRendersRetryPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	c := startRouteManager(t, nil)
	ctx := context.Background()
	must(t, c.Create(ctx, namespaceObj("plain")))
	must(t, c.Create(ctx, rp("plain", "own", "own.example")))
	polltest.Until(t, 30*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, types.NamespacedName{Namespace: "plain", Name: v1alpha1.PoliciesConfigMapName}, &cm); err != nil {
			return err
		}
		doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
		if err != nil {
			return err
		}
		if doc.Version != policyset.WrittenVersion || len(doc.Policies) != 1 || doc.Policies[0].Name != "own" {
			return fmt.Errorf("version %d, %d policies; want version %d and policy own", doc.Version, len(doc.Policies), policyset.WrittenVersion)
		}
		return nil
	})
	var routes gwv1.HTTPRouteList
	if err := c.List(ctx, &routes); err == nil || !strings.Contains(err.Error(), "no matches for kind") {
		t.Fatalf("listing HTTPRoutes: %v; want the API server to serve none", err)
	}
}

func namespaceObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
}

func rp(ns, name string, hosts ...string) *v1alpha1.RetryPolicy {
	return policy(ns, name, nil, upstream("u", hosts...))
}

func injectedPod(ns, name string) *corev1.Pod {
	return testPod(ns, name, map[string]string{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected})
}

func parentRef(ns, name string) gwv1.ParentReference {
	ref := gwv1.ParentReference{Group: ptr.To(gwv1.Group("")), Kind: ptr.To(gwv1.Kind("Service")), Name: gwv1.ObjectName(name)}
	if ns != "" {
		ref.Namespace = ptr.To(gwv1.Namespace(ns))
	}
	return ref
}

func retry(attempts int, codes ...int) *gwv1.HTTPRouteRetry {
	r := &gwv1.HTTPRouteRetry{Attempts: ptr.To(attempts)}
	for _, c := range codes {
		r.Codes = append(r.Codes, gwv1.HTTPRouteRetryStatusCode(c))
	}
	return r
}

func route(ns, name string, parent gwv1.ParentReference, rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}}, Rules: rules}}
}

func budget(ns, service string, percent int) *gwxv1a1.XBackendTrafficPolicy {
	return &gwxv1a1.XBackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: service + "-budget"},
		Spec: gwxv1a1.BackendTrafficPolicySpec{
			TargetRefs:      []gwxv1a1.LocalPolicyTargetReference{{Group: "", Kind: "Service", Name: gwv1.ObjectName(service)}},
			RetryConstraint: &gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Percent: ptr.To(percent)}},
		}}
}

// TestRouteAndBudgetChangesReRenderEveryCaller: a budget's change reaches
// every namespace the route is rendered into, and a route's deletion
// removes it from all of them; a ConfigMap that held only the route goes.
func TestRouteAndBudgetChangesReRenderEveryCaller(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	c := startRouteManager(t, gatewayCRDs(t))
	ctx := context.Background()
	for _, o := range []client.Object{namespaceObj("chg-shop"), namespaceObj("chg-web"), service("chg-shop", "payments"),
		rp("chg-shop", "own", "own.example"), injectedPod("chg-web", "app"), budget("chg-shop", "payments", 5),
		route("chg-shop", "retries", parentRef("", "payments"), gwv1.HTTPRouteRule{Retry: retry(2, 503)})} {
		must(t, c.Create(ctx, o))
	}
	rendered := func(want map[string][]string) {
		t.Helper()
		unprefix := strings.NewReplacer("chg-", "")
		polltest.Until(t, 30*time.Second, func() error {
			return diffRendered(c, "chg", unprefix, want, []client.Object{namespaceObj("chg-shop"), namespaceObj("chg-web")})
		})
	}
	const line = "shop/retries service/shop/payments [%spayments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 attempts 3 budget %d%%"
	rendered(map[string][]string{"shop": {fmt.Sprintf(line, "payments ", 5)}, "web": {fmt.Sprintf(line, "", 5)}})

	polltest.Until(t, 10*time.Second, func() error {
		var b gwxv1a1.XBackendTrafficPolicy
		if err := c.Get(ctx, types.NamespacedName{Namespace: "chg-shop", Name: "payments-budget"}, &b); err != nil {
			return err
		}
		b.Spec.RetryConstraint.Budget.Percent = ptr.To(9)
		return c.Update(ctx, &b)
	})
	rendered(map[string][]string{"shop": {fmt.Sprintf(line, "payments ", 9)}, "web": {fmt.Sprintf(line, "", 9)}})

	must(t, c.Delete(ctx, route("chg-shop", "retries", parentRef("", "payments"))))
	rendered(nil)
	polltest.Until(t, 30*time.Second, func() error {
		err := c.Get(ctx, types.NamespacedName{Namespace: "chg-web", Name: v1alpha1.PoliciesConfigMapName}, &corev1.ConfigMap{})
		if err == nil {
			return fmt.Errorf("ConfigMap chg-web/%s still exists with no policy and no route", v1alpha1.PoliciesConfigMapName)
		}
		return client.IgnoreNotFound(err)
	})
}
