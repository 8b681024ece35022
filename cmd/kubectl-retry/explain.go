package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

func runExplain(args []string, stdout, stderr io.Writer) int {
	const sub = "explain"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	host := fs.String("host", "", "a host (host, host:port or URL) the pod calls: which policy and upstream apply")
	grpcMethod := fs.String("grpc-method", "", "with --host (the :authority): a gRPC method /package.Service/Method the pod calls")
	output := outputFlag(fs)
	pos, err := parseCommand(fs, args, output)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	if len(pos) != 1 {
		return usageErr(stderr, sub, fmt.Errorf("want one argument pod/NAME"))
	}
	name, ok := strings.CutPrefix(pos[0], "pod/")
	if !ok {
		name, ok = strings.CutPrefix(pos[0], "pods/")
	}
	if !ok || name == "" {
		return usageErr(stderr, sub, fmt.Errorf("%q: want pod/NAME", pos[0]))
	}
	if *grpcMethod != "" && *host == "" {
		return usageErr(stderr, sub, fmt.Errorf("--grpc-method: name the call's :authority with --host too"))
	}
	if err := checkGRPCMethodName(*grpcMethod); err != nil {
		return usageErr(stderr, sub, err)
	}
	c, ns, err := cf.client()
	if err != nil {
		return failed(stderr, sub, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := explainPod(ctx, c, ns, name, call{host: *host, grpcMethod: *grpcMethod})
	if err != nil {
		return failed(stderr, sub, err)
	}
	code := exitOK
	if len(ex.Findings) > 0 {
		code = exitFindings
	}
	return report(stdout, stderr, *output, ex, code, func() { printExplanation(stdout, ex) })
}

// printExplanation writes ex for people: the pod's injection, the policies
// selecting it, the host, the findings.
func printExplanation(stdout io.Writer, ex Explanation) {
	fmt.Fprintf(stdout, "pod %s: %s\n", ex.Pod, wrap(ex.Detail, 90, "  "))
	if len(ex.Policies) == 0 {
		fmt.Fprintln(stdout, "policies: none in the namespace selects this pod")
	} else {
		fmt.Fprintln(stdout, "policies selecting this pod:")
		var t table
		t.add("", "  POLICY", "ACCEPTED", "REASON", "RENDERED", "UPSTREAMS")
		for _, p := range ex.Policies {
			note := ""
			if p.Accepted != "True" && p.Message != "" {
				note = p.Message
			}
			t.add(note, "  "+p.Name, p.Accepted, dash(p.Reason), yesNo(p.Rendered), strings.Join(p.Upstreams, ","))
		}
		t.write(stdout)
	}
	if h := ex.Host; h != nil {
		prefix := "host " + h.Host + ": "
		fmt.Fprintf(stdout, "%s%s\n", prefix, wrapWords(h.Detail, max(40, 98-len(prefix)), "  "))
	}
	for _, f := range ex.Findings {
		fmt.Fprintf(stdout, "finding: %s\n", wrapWords(f, 88, "  "))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// wrapWords breaks text at blanks so no line passes width; continuation lines
// get indent.
func wrapWords(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) > width:
			lines = append(lines, line)
			line = indent + w
		default:
			line += " " + w
		}
	}
	return strings.Join(append(lines, line), "\n")
}

// Explanation is what explain reports about one pod.
type Explanation struct {
	Pod      string `json:"pod"`
	Injected bool   `json:"injected"`
	// Reason is podinject.ShouldInject's reason: why the pod is (or is not) injected.
	Reason   string       `json:"reason"`
	Detail   string       `json:"detail"`
	Policies []PolicyInfo `json:"policies"`
	Host     *HostMatch   `json:"host,omitempty"`
	Findings []string     `json:"findings"`
}

// PolicyInfo is one RetryPolicy of the pod's namespace whose selector selects it.
type PolicyInfo struct {
	Name string `json:"name"`
	// Accepted is the status of the Accepted condition (True, False, Unknown),
	// with its reason (Valid, Invalid, Conflict) and message.
	Accepted string `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	// Rendered: the policy is in the namespace's retry-policies ConfigMap, which
	// the pod's sidecar reads.
	Rendered  bool     `json:"rendered"`
	Upstreams []string `json:"upstreams"`
}

// HostMatch says which policy and upstream the pod's sidecar uses for a host.
type HostMatch struct {
	Host     string `json:"host"`
	Policy   string `json:"policy,omitempty"`
	Upstream string `json:"upstream,omitempty"`
	Pattern  string `json:"pattern,omitempty"`
	// GRPC is what the upstream retries of gRPC calls: set when it lists
	// gRPC statuses or methods, or when --grpc-method names a call.
	GRPC *GRPCMatch `json:"grpc,omitempty"`
	// Route is the Gateway API route rule that applies, when no RetryPolicy
	// upstream names the host: "HTTPRoute shop/payments-retries, rule 0".
	Route  string `json:"route,omitempty"`
	Detail string `json:"detail"`
}

// GRPCMatch is what an upstream does with gRPC calls (docs/grpc.md).
type GRPCMatch struct {
	// Method is --grpc-method, and Replayable whether a gRPC pattern of
	// replayableMethods matches it (so a listed status is retried).
	Method     string `json:"method,omitempty"`
	Replayable bool   `json:"replayable"`
	// StatusCodes are retryOn.grpcStatusCodes; Methods the gRPC patterns of
	// replayableMethods.
	StatusCodes []string `json:"statusCodes"`
	Methods     []string `json:"methods"`
}

// call is what explain is asked about a call of the pod: its host (or
// :authority), and for a gRPC call its method.
type call struct{ host, grpcMethod string }

// explainPod gathers the pod, its namespace, the policies and the rendered
// ConfigMap, and explains them with the project's own pure functions.
func explainPod(ctx context.Context, c client.Client, ns, name string, to call) (Explanation, error) {
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return Explanation{}, err
	}
	var nsObj corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Pod: ns + "/" + name, Policies: []PolicyInfo{}, Findings: []string{}}
	ex.explainInjection(podinject.Config{ExcludedNamespaces: excludedNamespaces(ctx, c)}, &nsObj, &pod)
	var rps v1alpha1.RetryPolicyList
	if err := c.List(ctx, &rps, client.InNamespace(ns)); err != nil {
		return Explanation{}, err
	}
	doc, err := ex.renderedDocument(ctx, c, ns)
	if err != nil {
		return Explanation{}, err
	}
	selected, err := policyset.Select(doc, pod.Labels)
	if err != nil {
		return Explanation{}, err
	}
	ex.Policies = append(ex.Policies, policiesSelecting(rps.Items, pod.Labels, selected)...)
	if to.host != "" {
		m, err := matchHost(selected, to)
		if err != nil {
			return Explanation{}, err
		}
		ex.Host = &m
	}
	return ex, nil
}

// explainInjection says whether the pod got the sidecar and why, with the
// injector's own ShouldInject: for an injected pod, whether it would be
// injected now; for one without, whether it should have been (a finding).
func (ex *Explanation) explainInjection(cfg podinject.Config, nsObj *corev1.Namespace, pod *corev1.Pod) {
	ns := nsObj.Name
	if hasSidecar(pod) {
		ex.Injected = true
		bare := pod.DeepCopy()
		bare.Spec.InitContainers = slices.DeleteFunc(bare.Spec.InitContainers, isSidecar)
		bare.Spec.Containers = slices.DeleteFunc(bare.Spec.Containers, isSidecar)
		ok, why := cfg.ShouldInject(nsObj, bare)
		ex.Reason = string(why)
		ex.Detail = "injected: " + why.Sentence(ns)
		if !ok {
			ex.Detail = "injected, but would not be now: " + why.Sentence(ns)
		}
		return
	}
	ok, why := cfg.ShouldInject(nsObj, pod)
	ex.Reason = string(why)
	ex.Detail = "not injected: " + why.Sentence(ns)
	if ok {
		ex.Detail = "not injected although opted in (" + why.Sentence(ns) + ")"
		ex.Findings = append(ex.Findings, "opted in but has no sidecar: created before the opt-in or while the "+
			"webhook was unreachable (failurePolicy Ignore); recreate the pod")
	}
}

// renderedDocument is the document of namespace ns's retry-policies
// ConfigMap: zero when there is none, and also when it does not parse (a
// finding).
func (ex *Explanation) renderedDocument(ctx context.Context, c client.Client, ns string) (policyset.Document, error) {
	var cm corev1.ConfigMap
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName}, &cm); {
	case apierrors.IsNotFound(err):
		return policyset.Document{}, nil
	case err != nil:
		return policyset.Document{}, err
	}
	doc, err := policyset.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]))
	if err != nil {
		ex.Findings = append(ex.Findings, fmt.Sprintf("ConfigMap %s: %v", v1alpha1.PoliciesConfigMapName, err))
	}
	return doc, nil
}

// policiesSelecting describes the policies whose podSelector selects a pod
// with podLabels, by name; rendered are the ones the ConfigMap holds for it.
func policiesSelecting(policies []v1alpha1.RetryPolicy, podLabels map[string]string, rendered []policyset.Policy) []PolicyInfo {
	isRendered := map[string]bool{}
	for _, p := range rendered {
		isRendered[p.Name] = true
	}
	sort.Slice(policies, func(i, j int) bool { return policies[i].Name < policies[j].Name })
	var out []PolicyInfo
	for i := range policies {
		p := &policies[i]
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.PodSelector)
		if err != nil || (p.Spec.PodSelector != nil && !sel.Matches(labels.Set(podLabels))) {
			continue
		}
		info := PolicyInfo{Name: p.Name, Accepted: string(metav1.ConditionUnknown), Rendered: isRendered[p.Name]}
		if cond := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted)); cond != nil {
			info.Accepted, info.Reason, info.Message = string(cond.Status), cond.Reason, cond.Message
		}
		for _, u := range p.Spec.Upstreams {
			info.Upstreams = append(info.Upstreams, u.Name)
		}
		out = append(out, info)
	}
	return out
}

// matchHost finds the upstream the sidecar would use for host, with the
// sidecar's own compilation and host matching (retrypolicy.Set).
func matchHost(selected []policyset.Policy, to call) (HostMatch, error) {
	host := to.host
	scheme, authority := "http", host
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		scheme, authority = u.Scheme, u.Host
	}
	m := HostMatch{Host: host}
	set, err := policyset.Compile(selected)
	if err != nil {
		return HostMatch{}, fmt.Errorf("the rendered policies do not compile: %w", err)
	}
	p, pattern := set.MatchPattern(scheme, authority)
	if p == nil {
		return matchRoute(selected, m, authority, host)
	}
	m.Pattern = pattern
	names := policyset.NamesOf(selected)
	for _, rp := range selected {
		for _, u := range rp.Upstreams {
			if p.Name() == names.Of(rp.Name, u.Name) {
				m.Policy, m.Upstream = rp.Name, u.Name
			}
		}
	}
	m.Detail = fmt.Sprintf("RetryPolicy %s, upstream %s, by host pattern %q", m.Policy, m.Upstream, m.Pattern)
	if m.GRPC = grpcMatch(p, to.grpcMethod); m.GRPC != nil {
		m.Detail += "; " + m.GRPC.sentence()
	}
	return m, nil
}

// matchRoute finds the route rule the sidecar would use for a GET of host
// (a URL's path chooses among the rules) when no RetryPolicy upstream names
// it (docs/gateway-api.md#precedence).
func matchRoute(selected []policyset.Policy, m HostMatch, authority, host string) (HostMatch, error) {
	m.Detail = "no policy or route of this pod names the host: its requests pass through the sidecar unchanged, never retried"
	routes, err := policyset.CompileRoutes(selected)
	if err != nil {
		return HostMatch{}, fmt.Errorf("the rendered routes do not compile: %w", err)
	}
	if routes == nil || !routes.Has(authority) {
		return m, nil
	}
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}}
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		req.URL = u
	}
	_, r, ok := routes.Match(authority, req)
	if !ok {
		m.Detail = fmt.Sprintf("routes name the host, but no rule matches GET %s: such requests pass through, never retried", req.URL.Path)
		return m, nil
	}
	m.Route = fmt.Sprintf("%s %s/%s, rule %d", r.Kind, r.Namespace, r.Name, r.Rule)
	m.Detail = fmt.Sprintf("%s, for GET %s (Gateway API precedence; give a URL to choose the path)", m.Route, req.URL.Path)
	return m, nil
}

// grpcMatch is what policy p retries of gRPC calls, of method's if one is
// named; nil when p has no gRPC status or pattern and no method is named.
func grpcMatch(p *retrypolicy.Policy, method string) *GRPCMatch {
	c := p.Config()
	g := &GRPCMatch{Method: method, StatusCodes: []string{}, Methods: []string{}}
	for _, n := range c.RetryOnGRPCStatus {
		g.StatusCodes = append(g.StatusCodes, string(v1alpha1.GRPCStatusCodeOf(n)))
	}
	g.Methods = append(g.Methods, grpcPatterns(c.ReplayableMethods)...)
	if method == "" && len(g.StatusCodes) == 0 && len(g.Methods) == 0 {
		return nil
	}
	g.Replayable = method != "" && p.GRPCMethodReplayable(method)
	return g
}

// sentence says it for people, in the terms of docs/grpc.md.
func (g *GRPCMatch) sentence() string {
	codes := "retries no gRPC status (retryOn.grpcStatusCodes is empty)"
	if len(g.StatusCodes) > 0 {
		codes = "retries " + strings.Join(g.StatusCodes, ", ")
	}
	switch {
	case g.Method == "":
		return fmt.Sprintf("gRPC calls: the upstream %s of the methods [%s]", codes, strings.Join(g.Methods, ", "))
	case !g.Replayable && len(g.StatusCodes) == 0:
		return fmt.Sprintf("gRPC %s: not replayable (no gRPC pattern of replayableMethods matches it), and the upstream %s",
			g.Method, codes)
	case !g.Replayable:
		return fmt.Sprintf("gRPC %s: not replayable (no gRPC pattern of replayableMethods matches it): never sent twice, "+
			"%s given back as not-replayable", g.Method, strings.Join(g.StatusCodes, ", "))
	case len(g.StatusCodes) == 0:
		return fmt.Sprintf("gRPC %s: replayable, but the upstream %s", g.Method, codes)
	}
	return fmt.Sprintf("gRPC %s: replayable, the upstream %s", g.Method, codes)
}
