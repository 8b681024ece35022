package policyset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

const partnerYAML = `
# a comment-only document is skipped
---
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: partner, namespace: shop}
spec:
  podSelector: {matchLabels: {app: checkout}}
  upstreams:
  - name: payments-api
    hosts: ["api.partner.example:8443", "payments.shop.svc"]
    maxAttempts: 4
    deadline: 30s
    perTryTimeout: 5s
    backoff: {base: 1s, max: 8s, jitter: Equal}
    retryOn: {statusCodes: [429, 503], grpcStatusCodes: [UNAVAILABLE, RESOURCE_EXHAUSTED]}
    replayableMethods: [GET, HEAD, OPTIONS, /shop.v1.Payments/*]
    idempotencyKey: {header: Idempotency-Key}
    retryAfter: {maxWait: 30s, spread: 1s}
    budget: {retryPercent: 20, minRetriesPerSecond: 10}
    rateLimit: {requestsPerMinute: 90, burst: 3}
    concurrency: {maxInFlight: 3, maxQueued: 10, queueTimeout: 1s}
    pacing: {rateLimitHeaders: true}
---
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: catalogue}
spec:
  upstreams:
  - name: catalogue
    hosts: ["*.catalogue.svc"]
`

func TestFromPolicyYAMLConvertsEveryField(t *testing.T) {
	doc, err := FromPolicyYAML([]byte(partnerYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Policies) != 2 || doc.Policies[1].Namespace != DefaultNamespace {
		t.Fatalf("want 2 policies, the second in %q; got %+v", DefaultNamespace, doc.Policies)
	}
	got, err := ToConfig(doc.Policies[0].Upstreams[0])
	if err != nil {
		t.Fatal(err)
	}
	want := retrypolicy.Config{
		Name:                 "payments-api",
		Hosts:                []string{"api.partner.example:8443", "payments.shop.svc"},
		MaxAttempts:          4,
		Deadline:             30 * time.Second,
		PerTryTimeout:        5 * time.Second,
		Backoff:              retrypolicy.Backoff{Base: time.Second, Max: 8 * time.Second, Jitter: retrypolicy.JitterEqual},
		RetryOnStatus:        []int{429, 503},
		RetryOnGRPCStatus:    []uint32{14, 8},
		RetryOn:              retrypolicy.RetryConnectFailure | retrypolicy.RetryResetBeforeHeaders,
		ReplayableMethods:    []string{"GET", "HEAD", "OPTIONS", "/shop.v1.Payments/*"},
		IdempotencyKeyHeader: "Idempotency-Key",
		MaxReplayBodyBytes:   65536,
		RetryAfterMaxWait:    30 * time.Second,
		RetryAfterSpread:     time.Second,
		Budget:               &limits.BudgetConfig{RetryPercent: 20, MinRetriesPerSecond: 10},
		RateLimit:            &limits.RateLimitConfig{RequestsPerSecond: 1.5, Burst: 3},
		Concurrency:          &limits.ConcurrencyConfig{MaxInFlight: 3, MaxQueued: 10, QueueTimeout: time.Second},
		Pacing:               limits.PacingConfig{RateLimitHeaders: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ToConfig (-want +got):\n%s", diff)
	}
}

func TestFromPolicyYAMLRejectsWhatTheAPIRejects(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want string
	}{
		"a backoff max below its base names the field and the base": {
			yaml: "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], backoff: {base: 2s, max: 1s}}\n",
			want: `RetryPolicy default/p: spec.upstreams[0].backoff.max: Invalid value: "1s": must be >= backoff.base (2s)`,
		},
		"an unknown field is an error, as under strict field validation": {
			yaml: "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], retries: 3}\n",
			want: "document 0: spec.upstreams[0].retries: unknown field; the fields here are name, hosts, maxAttempts, deadline, perTryTimeout, connectTimeout, backoff, retryOn, replayableMethods, idempotencyKey, maxReplayBodyBytes, retryAfter, budget, rateLimit, quotaRef, concurrency, pacing, tls",
		},
		"holdOnDeferral with a single attempt is refused: nothing is ever deferred": {
			yaml: "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], maxAttempts: 1, pacing: {holdOnDeferral: true}}\n",
			want: "RetryPolicy default/p: spec.upstreams[0].pacing.holdOnDeferral: Invalid value: true: needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred",
		},
		"another kind is refused": {
			yaml: "apiVersion: v1\nkind: Secret\nmetadata: {name: p}\n",
			want: `document 0: apiVersion/kind is "v1"/"Secret"; want policy.retry.dev/v1alpha1/RetryPolicy (or policy.retry.dev/v1alpha1/SharedQuota, v1/ConfigMap for a CA, gateway.networking.k8s.io/v1/HTTPRoute or GRPCRoute, gateway.networking.x-k8s.io/v1alpha1/XBackendTrafficPolicy)`,
		},
		"a caCertificateRef without its ConfigMap names the ref and the way out": {
			yaml: "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], tls: {caCertificateRefs: [{name: partner-ca}]}}\n",
			want: `RetryPolicy default/p: spec.upstreams[0].tls.caCertificateRefs[0].name: Not found: "partner-ca": ConfigMap default/partner-ca does not exist (give the CA ConfigMap as a document of a --policy-file, or use the system roots: wellKnownCACertificates: System with SSL_CERT_FILE)`,
		},
		"a CA ConfigMap without ca.crt is refused": {
			yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: partner-ca}\ndata: {tls.crt: x}\n---\napiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], tls: {caCertificateRefs: [{name: partner-ca}]}}\n",
			want: `RetryPolicy default/p: spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "partner-ca": ConfigMap default/partner-ca has no key ca.crt (give the CA ConfigMap as a document of a --policy-file, or use the system roots: wellKnownCACertificates: System with SSL_CERT_FILE)`,
		},
		"a ca.crt without a certificate is refused": {
			yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: partner-ca}\ndata: {ca.crt: not a certificate}\n---\napiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc], tls: {caCertificateRefs: [{name: partner-ca}]}}\n",
			want: `RetryPolicy default/p: spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "partner-ca": key ca.crt of ConfigMap default/partner-ca holds no PEM CERTIFICATE that parses (give the CA ConfigMap as a document of a --policy-file, or use the system roots: wellKnownCACertificates: System with SSL_CERT_FILE)`,
		},
		"a route whose parent is a Gateway is refused": {
			yaml: "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{name: my-gateway}]\n  rules: [{retry: {codes: [503]}}]\n",
			want: `HTTPRoute default/r: spec.parentRefs: Invalid value: the sidecar applies routes whose parent is a Service (group: "", kind: Service); this one has none`,
		},
		"a route with a code the sidecar does not retry is refused": {
			yaml: "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: payments}]\n  rules: [{retry: {codes: [501]}}]\n",
			want: `HTTPRoute default/r: spec.rules[0].retry.codes[0]: Unsupported value: 501: supported values: "408", "425", "429", "500", "502", "503", "504"`,
		},
		"an unknown route field is an error": {
			yaml: "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: payments}]\n  rules: [{retries: 3}]\n",
			want: `document 0: spec.rules[0].retries: unknown field; the fields here are name, matches, filters, backendRefs, timeouts, retry, sessionPersistence`,
		},
		"a file without policies is refused": {
			yaml: "# nothing here\n",
			want: "no RetryPolicy or HTTPRoute documents found",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := FromPolicyYAML([]byte(tc.yaml))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got error %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestSelectByPodLabels(t *testing.T) {
	doc, err := FromPolicyYAML([]byte(partnerYAML))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		labels map[string]string
		want   []string
	}{
		"without label information every policy applies":                 {labels: nil, want: []string{"partner", "catalogue"}},
		"a checkout pod gets the selected and the empty-selector policy": {labels: map[string]string{"app": "checkout"}, want: []string{"partner", "catalogue"}},
		"another pod gets only the empty-selector policy":                {labels: map[string]string{"app": "web"}, want: []string{"catalogue"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sel, err := Select(doc, tc.labels)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range sel {
				got = append(got, p.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompileMatchesHostsAndQualifiesCollidingNames(t *testing.T) {
	doc, err := FromPolicyYAML([]byte(partnerYAML + `---
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: other}
spec:
  upstreams:
  - name: catalogue
    hosts: ["catalogue.other.svc"]
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(doc.Policies)
	if err != nil {
		t.Fatal(err)
	}
	for authority, want := range map[string]string{
		"api.partner.example:8443": "payments-api",
		"x.catalogue.svc":          "catalogue/catalogue",
		"catalogue.other.svc":      "other/catalogue",
	} {
		p := set.Match(authority)
		if p == nil || p.Name() != want {
			t.Errorf("Match(%q) = %v, want %s", authority, p, want)
		}
	}
	if p := set.Match("api.partner.example:443"); p != nil {
		t.Errorf("a host:port pattern must not match another port, got %s", p.Name())
	}
}

func TestSamplesLoadAsPolicyFiles(t *testing.T) {
	files, _ := filepath.Glob("../../config/samples/*-*.yaml")
	if len(files) < 3 {
		t.Fatalf("want 3 samples, got %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := FromPolicyYAML(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := Compile(doc.Policies); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !strings.HasPrefix(doc.Policies[0].Namespace, "shop") {
			t.Errorf("%s: namespace %q", f, doc.Policies[0].Namespace)
		}
	}
}

// The API (v1alpha1.ValidateHostPattern) and the pure core (retrypolicy.Compile)
// each check host patterns: the core cannot import the API. They must agree, or a
// policy accepted by the API server would be refused by every sidecar.
var hostPatternSeeds = []string{
	"payments.shop.svc", "api.partner.example:8443", "*.catalogue.svc", "10.0.0.7", "10.0.0.7:8080",
	"[fd00::7]", "[fd00::7]:8080", "localhost", "a", "x-1.y-2",
	"", "Payments.svc", "http://payments", "payments.svc:", "payments.svc:0", "payments.svc:70000",
	"payments.svc:08080", "fd00::7", "api.*.example", "*.example:443", "*api.example", "*.", "*",
	"-bad.svc", "bad-.svc", "a..b", "a_b.svc", "[fd00::7", "[zz::1]:80", "pay ments.svc",
}

func TestHostPatternCheckersAgree(t *testing.T) {
	for _, h := range hostPatternSeeds {
		checkHostPatternAgreement(t, h)
	}
}

// FuzzHostPatternCheckersAgree feeds random host patterns to both checkers.
func FuzzHostPatternCheckersAgree(f *testing.F) {
	for _, h := range hostPatternSeeds {
		f.Add(h)
	}
	f.Fuzz(checkHostPatternAgreement)
}

func checkHostPatternAgreement(t *testing.T, h string) {
	apiOK := v1alpha1.ValidateHostPattern(h) == ""
	_, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "u", Hosts: []string{h}, MaxAttempts: 3, Deadline: 10 * time.Second,
		Backoff:       retrypolicy.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: retrypolicy.JitterFull},
		RetryOnStatus: []int{503}, ReplayableMethods: []string{"GET"}, RetryAfterMaxWait: 30 * time.Second,
		RetryAfterSpread: time.Second,
	})
	if coreOK := err == nil; apiOK != coreOK {
		t.Errorf("host %q: API accepts=%v, retrypolicy.Compile accepts=%v (%v)", h, apiOK, coreOK, err)
	}
}

func TestPolicyFilesResolveCACertificateRefsFromConfigMapDocuments(t *testing.T) {
	ca1, ca2 := testenv.CAPEM(t, "one"), testenv.CAPEM(t, "two")
	indent := func(s string) string { return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ") }
	policy := `apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: partner, namespace: shop}
spec:
  upstreams:
  - name: partner
    hosts: [api.partner.example]
    tls: {hostname: api.partner.example, port: 8443, caCertificateRefs: [{name: ca-one}, {name: ca-two}]}
  - name: public
    hosts: [api.public.example]
    tls: {}
`
	cms := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca-one, namespace: shop}\ndata:\n  ca.crt: |\n" + indent("# a comment is dropped\n"+ca1) +
		"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca-two, namespace: shop}\ndata:\n  ca.crt: |\n" + indent(ca2) + "\n"
	doc, err := FromPolicyFiles([]byte(policy), []byte(cms))
	if err != nil {
		t.Fatal(err)
	}
	ups := doc.Policies[0].Upstreams
	if got, want := ups[0].CABundle, ca1+ca2; got != want {
		t.Errorf("caBundle of partner:\n%s\nwant the two CAs in ref order:\n%s", got, want)
	}
	if ups[1].CABundle != "" || ups[1].TLS == nil || ups[1].TLS.WellKnownCACertificates != nil {
		t.Errorf("public: want tls {} kept as written and no bundle, got tls %+v bundle %q", ups[1].TLS, ups[1].CABundle)
	}
	if _, err := FromPolicyFiles([]byte(policy)); err == nil || !strings.Contains(err.Error(), "ConfigMap shop/ca-one does not exist") {
		t.Errorf("without the ConfigMap file: got %v", err)
	}
}

// Each boolean of retryOn is its condition, and one absent from a rendering
// (written before the field existed) is the CRD's default.
func TestToConfigRetryOnConditions(t *testing.T) {
	tests := map[string]struct {
		retryOn *v1alpha1.RetryOn
		want    retrypolicy.Condition
	}{
		"absent retryOn: both defaults are on": {nil, retrypolicy.RetryConnectFailure | retrypolicy.RetryResetBeforeHeaders},
		"connectFailure off, resetBeforeHeaders absent (an older rendering)": {
			&v1alpha1.RetryOn{ConnectFailure: ptrTo(false)}, retrypolicy.RetryResetBeforeHeaders},
		"both off":               {&v1alpha1.RetryOn{ConnectFailure: ptrTo(false), ResetBeforeHeaders: ptrTo(false)}, 0},
		"resetBeforeHeaders off": {&v1alpha1.RetryOn{ResetBeforeHeaders: ptrTo(false)}, retrypolicy.RetryConnectFailure},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u := Upstream{UpstreamSpec: UpstreamSpec{Name: "api", Hosts: []string{"api.example"}, RetryOn: tc.retryOn}}
			cfg, err := ToConfig(u)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RetryOn != tc.want {
				t.Fatalf("RetryOn = %b, want %b", cfg.RetryOn, tc.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestNamesQualifyOnlyASharedUpstreamName: the name CompileUpstreams gives a
// compiled upstream, which the sidecar, kubectl retry and the simulator all
// read through NamesOf.
func TestNamesQualifyOnlyASharedUpstreamName(t *testing.T) {
	policies := []Policy{
		{Name: "a", Upstreams: []Upstream{{UpstreamSpec: UpstreamSpec{Name: "payments"}}}},
		{Name: "b", Upstreams: []Upstream{{UpstreamSpec: UpstreamSpec{Name: "payments"}}, {UpstreamSpec: UpstreamSpec{Name: "orders"}}}},
	}
	names := NamesOf(policies)
	for _, tc := range []struct{ policy, upstream, want string }{
		{"a", "payments", "a/payments"},
		{"b", "payments", "b/payments"},
		{"b", "orders", "orders"},
	} {
		if got := names.Of(tc.policy, tc.upstream); got != tc.want {
			t.Errorf("Of(%q, %q) = %q, want %q", tc.policy, tc.upstream, got, tc.want)
		}
	}
}

// TestRoutesRenderBesideRetryPolicies: a file may mix RetryPolicies, routes
// and budgets; each route is a policy of its own, one upstream per rule,
// named after its Service and carrying its matches.
func TestRoutesRenderBesideRetryPolicies(t *testing.T) {
	yaml := `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: payments-retries, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: payments}]
  rules:
  - matches: [{path: {value: /api}}]
    retry: {codes: [503], attempts: 2}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: b, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: payments}]
  retryConstraint: {budget: {percent: 5}}
---
` + partnerYAML
	doc, err := FromPolicyFilesIn("shop", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range doc.Policies {
		for _, u := range p.Upstreams {
			line := fmt.Sprintf("%s/%s %s %v", p.Namespace, p.Name, u.Name, u.Hosts)
			if u.Route != nil {
				line += fmt.Sprintf(" rule %d %+v attempts %d budget %d%%", u.Route.Rule, u.Route.Matches, *u.MaxAttempts, *u.Budget.RetryPercent)
			}
			got = append(got, line)
		}
	}
	want := []string{
		"shop/partner payments-api [api.partner.example:8443 payments.shop.svc]",
		"default/catalogue catalogue [*.catalogue.svc]",
		"shop/payments-retries service/shop/payments [payments payments.shop payments.shop.svc payments.shop.svc.cluster.local] rule 0 [{PathType:PathPrefix Path:/api Method: Headers:[] QueryParams:[]}] attempts 3 budget 5%",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered (-want +got):\n%s", diff)
	}
}
