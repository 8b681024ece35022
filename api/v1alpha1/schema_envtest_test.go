package v1alpha1_test

// These tests run against a real kube-apiserver and etcd built from source
// (hack/kube-binaries.sh) with config/crd/bases installed. They prove that the API
// server itself enforces the schema and CEL rules, and that the Go validation and
// defaulting used by the webhook, the reconciler and the sidecar agree with it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// validUpstream is the base every invalid case mutates: alone it is accepted.
const validUpstream = `
name: payments-api
hosts: ["payments.shop.svc"]
`

// invalidCases each break exactly one schema or CEL rule. wantField is the field
// path the API server must name; wantMessage a part of its message. goAgrees says
// the Go validation must reject the same object naming the same path (false only
// for type errors, which cannot be decoded into the Go types at all).
var invalidCases = map[string]struct {
	spec        string // YAML of spec; "%s" is replaced by the valid upstream
	upstream    string // YAML merged into the valid upstream
	wantField   string
	wantMessage string
	goAgrees    bool
}{
	"a policy without upstreams is rejected": {
		spec: `upstreams: []`, wantField: "spec.upstreams", wantMessage: "should have at least 1 items", goAgrees: true,
	},
	"an upstream name that is not a DNS-1123 label is rejected": {
		upstream: `name: Payments_API`, wantField: "spec.upstreams[0].name", wantMessage: "should match", goAgrees: true,
	},
	"two upstreams with the same name are rejected": {
		spec:      "upstreams:\n- {name: a, hosts: [a.svc]}\n- {name: a, hosts: [b.svc]}",
		wantField: "spec.upstreams[1]", wantMessage: "Duplicate value", goAgrees: true,
	},
	"an upstream without hosts is rejected": {
		upstream: `hosts: []`, wantField: "spec.upstreams[0].hosts", wantMessage: "should have at least 1 items", goAgrees: true,
	},
	"a quotaRef that is not a SharedQuota name is rejected": {
		upstream: `quotaRef: {name: Partner_Quota}`, wantField: "spec.upstreams[0].quotaRef.name", wantMessage: "should match", goAgrees: true,
	},
	"maxAttempts of zero is rejected": {
		upstream: `maxAttempts: 0`, wantField: "spec.upstreams[0].maxAttempts", wantMessage: "should be greater than or equal to 1", goAgrees: true,
	},
	"maxAttempts above ten is rejected": {
		upstream: `maxAttempts: 11`, wantField: "spec.upstreams[0].maxAttempts", wantMessage: "should be less than or equal to 10", goAgrees: true,
	},
	"maxAttempts given as a string is rejected": {
		upstream: `maxAttempts: "three"`, wantField: "spec.upstreams[0].maxAttempts", wantMessage: "must be of type integer",
	},
	"a deadline that is not a duration is rejected": {
		upstream: `deadline: 10 seconds`, wantField: "spec.upstreams[0].deadline", wantMessage: "should match", goAgrees: true,
	},
	"a zero deadline is rejected": {
		upstream: `deadline: 0s`, wantField: "spec.upstreams[0].deadline", wantMessage: "must be a positive duration", goAgrees: true,
	},
	"a connectTimeout longer than the deadline is rejected": {
		upstream: "deadline: 2s\nconnectTimeout: 3s", wantField: "spec.upstreams[0].connectTimeout", wantMessage: "must be <= deadline (2s)", goAgrees: true,
	},
	"a perTryTimeout equal to the deadline is rejected": {
		upstream: "deadline: 5s\nperTryTimeout: 5s", wantField: "spec.upstreams[0].perTryTimeout", wantMessage: "must be < deadline (5s)", goAgrees: true,
	},
	"a backoff max below its base is rejected": {
		upstream: "backoff: {base: 2s, max: 1s}", wantField: "spec.upstreams[0].backoff.max", wantMessage: "must be >= backoff.base (2s)", goAgrees: true,
	},
	"a backoff max below the default base is rejected": {
		upstream: "backoff: {max: 10ms}", wantField: "spec.upstreams[0].backoff.max", wantMessage: "must be >= backoff.base (100ms)", goAgrees: true,
	},
	"an unknown jitter is rejected": {
		upstream: "backoff: {jitter: Random}", wantField: "spec.upstreams[0].backoff.jitter", wantMessage: `supported values: "Full", "Equal", "None"`, goAgrees: true,
	},
	"a status code outside the allowed set is rejected": {
		upstream: "retryOn: {statusCodes: [404]}", wantField: "spec.upstreams[0].retryOn.statusCodes[0]", wantMessage: `supported values: "408", "425", "429", "500", "502", "503", "504"`, goAgrees: true,
	},
	"POST as a replayable method is rejected with a pointer to idempotencyKey": {
		upstream: "replayableMethods: [GET, POST]", wantField: "spec.upstreams[0].replayableMethods", wantMessage: "set idempotencyKey.header", goAgrees: true,
	},
	"PATCH as a replayable method is rejected": {
		upstream: "replayableMethods: [PATCH]", wantField: "spec.upstreams[0].replayableMethods", wantMessage: "POST and PATCH are not replayable", goAgrees: true,
	},
	"OK as a retried gRPC status is rejected with the allowed names": {
		upstream: "retryOn: {grpcStatusCodes: [UNAVAILABLE, OK]}", wantField: "spec.upstreams[0].retryOn.grpcStatusCodes[1]",
		wantMessage: `supported values: "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"`, goAgrees: true,
	},
	"a gRPC status in grpc-go's spelling is rejected": {
		upstream: "retryOn: {grpcStatusCodes: [Unavailable]}", wantField: "spec.upstreams[0].retryOn.grpcStatusCodes[0]", wantMessage: `Unsupported value: "Unavailable"`, goAgrees: true,
	},
	"a gRPC status listed twice is rejected": {
		upstream: "retryOn: {grpcStatusCodes: [UNAVAILABLE, ABORTED, UNAVAILABLE]}", wantField: "spec.upstreams[0].retryOn.grpcStatusCodes[2]", wantMessage: "Duplicate value", goAgrees: true,
	},
	"a gRPC method pattern with a wildcard service is rejected with the allowed shapes": {
		upstream: "replayableMethods: [GET, /shop.v1.*/GetPayment]", wantField: "spec.upstreams[0].replayableMethods",
		wantMessage: "must be a gRPC method pattern, /package.Service/Method or /package.Service/*", goAgrees: true,
	},
	"a gRPC method pattern without a method is rejected": {
		upstream: "replayableMethods: [/shop.v1.Payments]", wantField: "spec.upstreams[0].replayableMethods",
		wantMessage: "must be a gRPC method pattern", goAgrees: true,
	},
	"a 33-byte HTTP method is rejected": {
		upstream: "replayableMethods: [ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG]", wantField: "spec.upstreams[0].replayableMethods",
		wantMessage: "an HTTP method is at most 32 bytes", goAgrees: true,
	},
	"a 257-byte gRPC method pattern is rejected": {
		upstream: "replayableMethods: [/" + strings.Repeat("a", 252) + ".S/M]", wantField: "spec.upstreams[0].replayableMethods[0]",
		wantMessage: "may not be more than 256 bytes", goAgrees: true,
	},
	"a negative maxReplayBodyBytes is rejected": {
		upstream: "maxReplayBodyBytes: -1", wantField: "spec.upstreams[0].maxReplayBodyBytes", wantMessage: "should be greater than or equal to 0", goAgrees: true,
	},
	"a retryPercent above 100 is rejected": {
		upstream: "budget: {retryPercent: 150}", wantField: "spec.upstreams[0].budget.retryPercent", wantMessage: "should be less than or equal to 100", goAgrees: true,
	},
	"a negative retryAfter spread is rejected": {
		upstream: "retryAfter: {spread: -1s}", wantField: "spec.upstreams[0].retryAfter.spread", wantMessage: "should match", goAgrees: true,
	},
	"a rateLimit without requestsPerMinute is rejected": {
		upstream: "rateLimit: {burst: 3}", wantField: "spec.upstreams[0].rateLimit.requestsPerMinute", wantMessage: "Required value",
	},
	"a concurrency limit of zero is rejected": {
		upstream: "concurrency: {maxInFlight: 0}", wantField: "spec.upstreams[0].concurrency.maxInFlight", wantMessage: "should be greater than or equal to 1", goAgrees: true,
	},
	"an idempotencyKey without a header is rejected": {
		upstream: "idempotencyKey: {header: \"\"}", wantField: "spec.upstreams[0].idempotencyKey.header", wantMessage: "should be at least 1 chars long", goAgrees: true,
	},
	"more than 16 upstreams are rejected": {
		spec: "upstreams:\n" + func() string {
			var b strings.Builder
			for i := range 17 {
				fmt.Fprintf(&b, "- {name: u%d, hosts: [u%d.svc]}\n", i, i)
			}
			return b.String()
		}(),
		wantField: "spec.upstreams", wantMessage: "must have at most 16 items", goAgrees: true,
	},
	"holdOnDeferral with a single attempt is rejected: nothing is ever deferred": {
		upstream: "maxAttempts: 1\npacing: {holdOnDeferral: true}", wantField: "spec.upstreams[0].pacing.holdOnDeferral",
		wantMessage: "needs maxAttempts > 1 and at least one retryOn.statusCodes entry", goAgrees: true,
	},
	"holdOnDeferral with no retried status is rejected": {
		upstream: "retryOn: {statusCodes: []}\npacing: {holdOnDeferral: true}", wantField: "spec.upstreams[0].pacing.holdOnDeferral",
		wantMessage: "only a response that would be retried can be deferred", goAgrees: true,
	},
	"rateLimitHeaders given as a string is rejected": {
		upstream: `pacing: {rateLimitHeaders: "yes"}`, wantField: "spec.upstreams[0].pacing.rateLimitHeaders", wantMessage: "must be of type boolean",
	},
	"a tls hostname in upper case is rejected": {
		upstream: "tls: {hostname: API.partner.example}", wantField: "spec.upstreams[0].tls.hostname", wantMessage: "should match", goAgrees: true,
	},
	"a tls port of zero is rejected": {
		upstream: "tls: {port: 0}", wantField: "spec.upstreams[0].tls.port", wantMessage: "should be greater than or equal to 1", goAgrees: true,
	},
	"a tls port above 65535 is rejected": {
		upstream: "tls: {port: 70000}", wantField: "spec.upstreams[0].tls.port", wantMessage: "should be less than or equal to 65535", goAgrees: true,
	},
	"caCertificateRefs together with wellKnownCACertificates are rejected": {
		upstream:  "tls: {caCertificateRefs: [{name: partner-ca}], wellKnownCACertificates: System}",
		wantField: "spec.upstreams[0].tls.wellKnownCACertificates", wantMessage: "mutually exclusive", goAgrees: true,
	},
	"a wellKnownCACertificates other than System is rejected": {
		upstream: "tls: {wellKnownCACertificates: Mozilla}", wantField: "spec.upstreams[0].tls.wellKnownCACertificates", wantMessage: `supported values: "System"`, goAgrees: true,
	},
	"a caCertificateRef with an invalid ConfigMap name is rejected": {
		upstream: "tls: {caCertificateRefs: [{name: Partner_CA}]}", wantField: "spec.upstreams[0].tls.caCertificateRefs[0].name", wantMessage: "should match", goAgrees: true,
	},
	"a tls field that skips verification does not exist": {
		upstream: "tls: {insecureSkipVerify: true}", wantField: "spec.upstreams[0].tls.insecureSkipVerify", wantMessage: "unknown field",
	},
	"an unknown field is rejected by strict decoding": {
		upstream: "retries: 3", wantField: "spec.upstreams[0].retries", wantMessage: "unknown field",
	},
}

func TestAPIServerRejectsInvalidRetryPolicies(t *testing.T) {
	cl, ns := startAPIServer(t)
	if len(invalidCases) < 15 {
		t.Fatalf("the table must cover at least 15 rules, has %d", len(invalidCases))
	}
	i := 0
	for name, tc := range invalidCases {
		i++
		t.Run(name, func(t *testing.T) {
			obj := buildPolicy(t, ns, fmt.Sprintf("invalid-%d", i), tc.spec, tc.upstream)
			err := cl.Create(context.Background(), obj, client.FieldValidation("Strict"))
			if err == nil {
				t.Fatalf("API server accepted an invalid policy; want an error naming %s", tc.wantField)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantField+":") && !strings.Contains(msg, `"`+tc.wantField+`"`) {
				t.Errorf("error does not name field %s:\n%s", tc.wantField, msg)
			}
			if !strings.Contains(msg, tc.wantMessage) {
				t.Errorf("error lacks %q:\n%s", tc.wantMessage, msg)
			}
			if !tc.goAgrees {
				return
			}
			typed := toTyped(t, obj)
			v1alpha1.SetDefaults(typed)
			errs := v1alpha1.Validate(typed)
			if len(errs) == 0 {
				t.Fatalf("the API server rejects it but v1alpha1.Validate accepts it: the layers disagree")
			}
			if got := errs.ToAggregate().Error(); !strings.Contains(got, tc.wantField) {
				t.Errorf("v1alpha1.Validate names another field; want %s, got:\n%s", tc.wantField, got)
			}
		})
	}
}

// The sample policies and a minimal one are accepted, and what the API server
// stores (its defaults applied) equals what SetDefaults produces in Go.
func TestAPIServerDefaultsMatchGoDefaults(t *testing.T) {
	cl, ns := startAPIServer(t)
	objs := map[string]*unstructured.Unstructured{
		"a minimal policy gets every default": buildPolicy(t, ns, "minimal", "", ""),
		"a policy with rateLimit and concurrency gets their nested defaults": buildPolicy(t, ns, "admission", "",
			"rateLimit: {requestsPerMinute: 60}\nconcurrency: {maxInFlight: 2}"),
		"a policy with an empty pacing gets both pacing defaults": buildPolicy(t, ns, "pacing", "", "pacing: {}"),
		"a policy with rateLimitHeaders keeps holdOnDeferral off": buildPolicy(t, ns, "pacing-headers", "",
			"pacing: {rateLimitHeaders: true}"),
		"a policy that retries no status and replays no method by method keeps both lists empty": buildPolicy(t, ns, "empty-lists", "",
			"retryOn: {statusCodes: []}\nreplayableMethods: []\nidempotencyKey: {header: Idempotency-Key}"),
		"a policy with gRPC status codes and method patterns is accepted as written": buildPolicy(t, ns, "grpc", "",
			"retryOn: {grpcStatusCodes: [UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED]}\nreplayableMethods: [GET, /shop.v1.Payments/GetPayment, /shop.v1.Catalogue/*, /Greeter/SayHello, /"+strings.Repeat("a", 251)+".S/M]"),
		"a policy with tls: {} is accepted as written (System roots, request host and port)": buildPolicy(t, ns, "tls-empty", "", "tls: {}"),
		"a policy with every tls field is accepted": buildPolicy(t, ns, "tls-full", "",
			"tls: {hostname: api.partner.example, port: 8443, caCertificateRefs: [{name: partner-ca}, {name: partner-ca-next}]}"),
	}
	samples, err := filepath.Glob(filepath.Join(testenv.ModuleRoot(), "config", "samples", "*-*.yaml"))
	if err != nil || len(samples) < 3 {
		t.Fatalf("want at least 3 samples, got %v (%v)", samples, err)
	}
	for _, f := range samples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u.SetNamespace(ns)
		objs["sample "+filepath.Base(f)+" is accepted"] = u
	}
	for name, obj := range objs {
		t.Run(name, func(t *testing.T) {
			want := toTyped(t, obj)
			v1alpha1.SetDefaults(want)
			if errs := v1alpha1.Validate(want); len(errs) > 0 {
				t.Fatalf("v1alpha1.Validate rejects it: %v", errs.ToAggregate())
			}
			if err := cl.Create(context.Background(), obj, client.FieldValidation("Strict")); err != nil {
				t.Fatalf("API server rejected a valid policy: %v", err)
			}
			got := &v1alpha1.RetryPolicy{}
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				t.Errorf("stored spec differs from Go defaults (-go +apiserver):\n%s", diff)
			}
		})
	}
}

// The API server's list-type rules also hold: the same host twice inside one
// upstream is a duplicate of a set.
func TestAPIServerRejectsDuplicateHostInOneUpstream(t *testing.T) {
	cl, ns := startAPIServer(t)
	obj := buildPolicy(t, ns, "dup-host", "", `hosts: [a.svc, a.svc]`)
	err := cl.Create(context.Background(), obj)
	if err == nil || !strings.Contains(err.Error(), "spec.upstreams[0].hosts[1]") || !strings.Contains(err.Error(), "Duplicate value") {
		t.Fatalf("want a duplicate error on spec.upstreams[0].hosts[1], got %v", err)
	}
}

var shared struct {
	cl client.Client
	n  int
}

// startAPIServer starts one API server per test binary run (reused across tests)
// and returns a client and a fresh namespace.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	if shared.cl == nil {
		cfg := testenv.Start(&packageTB{t}, nil)
		scheme := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		shared.cl = cl
	}
	shared.n++
	ns := fmt.Sprintf("ns-%d-%d", shared.n, time.Now().UnixNano()%100000)
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if err := shared.cl.Create(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
	return shared.cl, ns
}

// packageTB defers envtest's cleanup to TestMain so one API server serves every
// test of the package (start costs ~4 s).
type packageTB struct{ testing.TB }

var cleanups []func()

func (p *packageTB) Cleanup(f func()) { cleanups = append(cleanups, f) }

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

func buildPolicy(t *testing.T, ns, name, spec, upstreamPatch string) *unstructured.Unstructured {
	t.Helper()
	up := map[string]any{}
	if err := yaml.Unmarshal([]byte(validUpstream), &up); err != nil {
		t.Fatal(err)
	}
	if upstreamPatch != "" {
		patch := map[string]any{}
		if err := yaml.Unmarshal([]byte(upstreamPatch), &patch); err != nil {
			t.Fatalf("bad test YAML %q: %v", upstreamPatch, err)
		}
		for k, v := range patch {
			up[k] = v
		}
	}
	specObj := map[string]any{"upstreams": []any{up}}
	if spec != "" {
		specObj = map[string]any{}
		if err := yaml.Unmarshal([]byte(spec), &specObj); err != nil {
			t.Fatalf("bad test YAML %q: %v", spec, err)
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "RetryPolicy",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       specObj,
	}}
}

func toTyped(t *testing.T, u *unstructured.Unstructured) *v1alpha1.RetryPolicy {
	t.Helper()
	p := &v1alpha1.RetryPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		t.Fatalf("cannot decode into the Go type: %v", err)
	}
	p.ObjectMeta = metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace()}
	return p
}
