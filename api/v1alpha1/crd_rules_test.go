package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/rules"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// constraintKeys are the OpenAPI keywords the kubebuilder markers write.
var constraintKeys = []string{"minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength", "pattern", "enum"}

// TestCRDMarkersEqualRules pins every bound, enum and pattern of an upstream in
// the generated CRD (config/crd/bases) to internal/rules: markers hold
// literals, so without this test the schema and the Go rules could drift apart.
// Every constraint of the upstream schema must be listed here, so a new marker
// cannot be added without naming the Go value it repeats.
func TestCRDMarkersEqualRules(t *testing.T) {
	durations := []string{"deadline", "perTryTimeout", "connectTimeout", "backoff.base", "backoff.max",
		"retryAfter.maxWait", "retryAfter.spread", "concurrency.queueTimeout"}
	want := map[string]string{
		"name minLength":                         "1",
		"name maxLength":                         itoa(rules.MaxNameLength),
		"name pattern":                           rules.NamePattern,
		"hosts minItems":                         "1",
		"hosts maxItems":                         itoa(rules.MaxHosts),
		"hosts[] maxLength":                      itoa(rules.MaxHostPatternLength),
		"replayableMethods maxItems":             itoa(rules.MaxReplayableMethods),
		"replayableMethods[] maxLength":          itoa(rules.MaxGRPCMethodPatternLength),
		"idempotencyKey.header minLength":        "1",
		"idempotencyKey.header maxLength":        itoa(rules.MaxHeaderNameLength),
		"retryOn.statusCodes maxItems":           itoa(len(rules.RetryableStatuses())),
		"retryOn.statusCodes[] enum":             fmt.Sprint(rules.RetryableStatuses()),
		"retryOn.grpcStatusCodes maxItems":       itoa(len(v1alpha1.GRPCStatusCodes())),
		"retryOn.grpcStatusCodes[] enum":         fmt.Sprint(v1alpha1.GRPCStatusCodes()),
		"backoff.jitter enum":                    fmt.Sprint(rules.Jitters()),
		"tls.hostname minLength":                 "1",
		"tls.hostname maxLength":                 itoa(rules.MaxDNSNameLength),
		"tls.hostname pattern":                   rules.DNSNamePattern,
		"tls.caCertificateRefs maxItems":         itoa(v1alpha1.MaxCACertificateRefs),
		"tls.caCertificateRefs[].name minLength": "1",
		"tls.caCertificateRefs[].name maxLength": itoa(rules.MaxDNSNameLength),
		"tls.caCertificateRefs[].name pattern":   rules.DNSNamePattern,
		"tls.wellKnownCACertificates enum":       fmt.Sprint([]v1alpha1.WellKnownCACertificates{v1alpha1.WellKnownCACertificatesSystem}),
		"quotaRef.name minLength":                "1",
		"quotaRef.name maxLength":                itoa(rules.MaxDNSNameLength),
		"quotaRef.name pattern":                  rules.DNSNamePattern,
	}
	for _, r := range rules.Ranges() {
		want[r.Path+" minimum"] = strconv.FormatInt(r.Min, 10)
		want[r.Path+" maximum"] = strconv.FormatInt(r.Max, 10)
	}
	for _, d := range durations {
		want[d+" maxLength"] = itoa(rules.MaxDurationLength)
		want[d+" pattern"] = rules.DurationPattern()
	}

	if got, want := fmt.Sprint([]v1alpha1.Jitter{v1alpha1.JitterFull, v1alpha1.JitterEqual, v1alpha1.JitterNone}), fmt.Sprint(rules.Jitters()); got != want {
		t.Errorf("v1alpha1's jitter constants are %s, internal/rules' %s", got, want)
	}
	crd := readCRD(t)
	version := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	root := version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	spec := child(t, root, "spec", "upstreams")
	if got, want := constraints(spec, "spec.upstreams"), map[string]string{
		"spec.upstreams minItems": "1", "spec.upstreams maxItems": itoa(rules.MaxUpstreams),
	}; !cmp.Equal(got, want) {
		t.Errorf("spec.upstreams constraints = %v, want %v", got, want)
	}
	if got := constraints(child(t, root, "status", "lastAccepted", "upstreams"), "upstreams"); got["upstreams maxItems"] != itoa(rules.MaxUpstreams) {
		t.Errorf("status.lastAccepted.upstreams maxItems = %q, want %d", got["upstreams maxItems"], rules.MaxUpstreams)
	}
	for name, schema := range map[string]map[string]any{
		"spec.upstreams[]":                spec["items"].(map[string]any),
		"status.lastAccepted.upstreams[]": child(t, root, "status", "lastAccepted", "upstreams")["items"].(map[string]any),
	} {
		got := map[string]string{}
		walk(schema, "", got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the markers of %s differ from internal/rules (-go +crd):\n%s", name, diff)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCRDReplayableMethodsRulesEqualRules pins the CEL rules of
// replayableMethods that the schema's keywords cannot say to internal/rules:
// the gRPC method grammar and the HTTP method token's length.
func TestCRDReplayableMethodsRulesEqualRules(t *testing.T) {
	crd := readCRD(t)
	version := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	root := version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	methods := child(t, child(t, root, "spec", "upstreams")["items"].(map[string]any), "replayableMethods")
	var got []string
	for _, v := range methods["x-kubernetes-validations"].([]any) {
		got = append(got, v.(map[string]any)["rule"].(string))
	}
	for _, want := range []string{
		"m.matches('" + rules.GRPCMethodPattern + "')",
		"size(m) <= " + itoa(rules.MaxMethodTokenLength),
	} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("no CEL rule of replayableMethods holds %s; the rules are %q", want, got)
		}
	}
}

// TestSharedQuotaCRDMarkersEqualRules pins every constraint of the SharedQuota
// spec schema to the Go values ValidateSharedQuota applies.
func TestSharedQuotaCRDMarkersEqualRules(t *testing.T) {
	want := map[string]string{
		"store.redis.address minLength":                   "3",
		"store.redis.address maxLength":                   itoa(v1alpha1.MaxRedisAddressLength),
		"store.redis.credentialsSecretRef.name minLength": "1",
		"store.redis.credentialsSecretRef.name maxLength": itoa(rules.MaxDNSNameLength),
		"store.redis.credentialsSecretRef.name pattern":   rules.DNSNamePattern,
		"onStoreLoss enum":                                fmt.Sprint(v1alpha1.StoreLossPolicies()),
	}
	for _, r := range v1alpha1.QuotaRanges() {
		want[r.Path+" minimum"] = strconv.FormatInt(r.Min, 10)
		want[r.Path+" maximum"] = strconv.FormatInt(r.Max, 10)
	}
	crd := readCRDFile(t, "policy.retry.dev_sharedquotas.yaml")
	version := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	root := version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	got := map[string]string{}
	spec := child(t, root, "spec")
	// The label selector's own schema is Kubernetes', not ours.
	delete(child(t, spec, "consumers")["properties"].(map[string]any), "namespaceSelector")
	walk(spec, "", got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the markers of the SharedQuota spec differ from the Go rules (-go +crd):\n%s", diff)
	}
}

func readCRD(t *testing.T) map[string]any {
	t.Helper()
	return readCRDFile(t, "policy.retry.dev_retrypolicies.yaml")
}

func readCRDFile(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.CRDDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// child follows properties from schema.
func child(t *testing.T, schema map[string]any, names ...string) map[string]any {
	t.Helper()
	for _, n := range names {
		props, _ := schema["properties"].(map[string]any)
		next, ok := props[n].(map[string]any)
		if !ok {
			t.Fatalf("the CRD schema has no property %s", strings.Join(names, "."))
		}
		schema = next
	}
	return schema
}

// walk collects the constraints of schema and its descendants, keyed by the
// field path below the upstream ("budget.retryPercent minimum"; list items
// as "hosts[]").
func walk(schema map[string]any, path string, out map[string]string) {
	for k, v := range constraints(schema, path) {
		out[k] = v
	}
	if items, ok := schema["items"].(map[string]any); ok {
		walk(items, path+"[]", out)
	}
	props, _ := schema["properties"].(map[string]any)
	for name, s := range props {
		p := name
		if path != "" {
			p = path + "." + name
		}
		walk(s.(map[string]any), p, out)
	}
}

func constraints(schema map[string]any, path string) map[string]string {
	out := map[string]string{}
	for _, k := range constraintKeys {
		v, ok := schema[k]
		if !ok {
			continue
		}
		switch x := v.(type) {
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = text(e)
			}
			if _, numeric := x[0].(float64); numeric {
				sort.Slice(parts, func(i, j int) bool { a, _ := strconv.Atoi(parts[i]); b, _ := strconv.Atoi(parts[j]); return a < b })
			}
			out[path+" "+k] = "[" + strings.Join(parts, " ") + "]"
		default:
			out[path+" "+k] = text(x)
		}
	}
	return out
}

// text prints a YAML scalar; numbers in full (16777216, not 1.6777216e+07).
func text(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}
