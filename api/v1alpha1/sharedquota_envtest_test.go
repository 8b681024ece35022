package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// validQuotaSpec is the base every invalid case mutates: alone it is accepted.
const validQuotaSpec = `
requestsPerMinute: 90
store: {redis: {address: "redis.retry-operator-system.svc:6379"}}
`

// TestAPIServerJudgesSharedQuotasAsValidateSharedQuotaDoes: each case breaks
// one schema or CEL rule of the SharedQuota (or, for the last ones, a rule
// only Go can check); the API server names the field, and
// v1alpha1.ValidateSharedQuota rejects the same object naming the same field.
func TestAPIServerJudgesSharedQuotasAsValidateSharedQuotaDoes(t *testing.T) {
	cl, _ := startAPIServer(t)
	for name, tc := range invalidSharedQuotaCases {
		t.Run(name, func(t *testing.T) {
			obj := buildQuota(t, "invalid-"+strings.ReplaceAll(strings.ToLower(name[:12]), " ", "-"), tc.patch)
			err := cl.Create(context.Background(), obj, client.FieldValidation("Strict"), client.DryRunAll)
			switch {
			case tc.wantMessage == "" && err != nil:
				t.Fatalf("the API server rejected what only Go should reject: %v", err)
			case tc.wantMessage != "" && err == nil:
				t.Fatalf("the API server accepted an invalid quota; want an error naming %s", tc.wantField)
			case tc.wantMessage != "":
				msg := err.Error()
				if !strings.Contains(msg, tc.wantField+":") && !strings.Contains(msg, `"`+tc.wantField+`"`) {
					t.Errorf("the error does not name field %s:\n%s", tc.wantField, msg)
				}
				if !strings.Contains(msg, tc.wantMessage) {
					t.Errorf("the error lacks %q:\n%s", tc.wantMessage, msg)
				}
			}
			q := toTypedQuota(t, obj)
			v1alpha1.SetSharedQuotaDefaults(q)
			errs := v1alpha1.ValidateSharedQuota(q)
			if got := errs.ToAggregate(); got == nil || !strings.Contains(got.Error(), tc.wantGo) {
				t.Errorf("ValidateSharedQuota = %v; want an error containing %s", got, tc.wantGo)
			}
		})
	}
}

// invalidSharedQuotaCase is a patch that makes a valid SharedQuota invalid,
// and how the API server and ValidateSharedQuota each reject it.
type invalidSharedQuotaCase struct {
	patch       string // YAML merged into the valid spec; a key with value null is removed
	wantField   string
	wantMessage string // of the API server; "" when only Go rejects it
	wantGo      string
}

var invalidSharedQuotaCases = map[string]invalidSharedQuotaCase{
	"neither requestsPerMinute nor requestsPerSecond is rejected": {
		patch: `requestsPerMinute: null`, wantField: "spec",
		wantMessage: "exactly one of requestsPerMinute or requestsPerSecond is required",
		wantGo:      "spec.requestsPerMinute: Required value: exactly one of requestsPerMinute or requestsPerSecond is required",
	},
	"both requestsPerMinute and requestsPerSecond are rejected": {
		patch: `requestsPerSecond: 10`, wantField: "spec",
		wantMessage: "exactly one of requestsPerMinute or requestsPerSecond is required",
		wantGo:      "spec.requestsPerSecond: Forbidden: exactly one of requestsPerMinute or requestsPerSecond is required",
	},
	"requestsPerMinute of zero is rejected": {
		patch: `requestsPerMinute: 0`, wantField: "spec.requestsPerMinute", wantMessage: "should be greater than or equal to 1",
		wantGo: "spec.requestsPerMinute: Invalid value: 0: must be between 1 and 6000000",
	},
	"requestsPerSecond above 100000 is rejected": {
		patch: "requestsPerMinute: null\nrequestsPerSecond: 100001", wantField: "spec.requestsPerSecond", wantMessage: "should be less than or equal to 100000",
		wantGo: "spec.requestsPerSecond: Invalid value: 100001: must be between 1 and 100000",
	},
	"a burst of zero is rejected": {
		patch: `burst: 0`, wantField: "spec.burst", wantMessage: "should be greater than or equal to 1",
		wantGo: "spec.burst: Invalid value: 0: must be between 1 and 10000",
	},
	"a concurrency of zero is rejected": {
		patch: `concurrency: 0`, wantField: "spec.concurrency", wantMessage: "should be greater than or equal to 1",
		wantGo: "spec.concurrency: Invalid value: 0: must be between 1 and 10000",
	},
	"an unknown onStoreLoss is rejected with the allowed values": {
		patch: `onStoreLoss: Unlimited`, wantField: "spec.onStoreLoss", wantMessage: `supported values: "LastShare", "EvenShare", "Deny"`,
		wantGo: `spec.onStoreLoss: Unsupported value: "Unlimited": supported values: "LastShare", "EvenShare", "Deny"`,
	},
	"a store without redis is rejected": {
		patch: `store: {}`, wantField: "spec.store.redis", wantMessage: "Required value",
		wantGo: `spec.store.redis.address: Invalid value: "": must be host:port`,
	},
	"a credentialsSecretRef that is not a Secret name is rejected": {
		patch: `store: {redis: {address: "r:6379", credentialsSecretRef: {name: Quota_Redis}}}`, wantField: "spec.store.redis.credentialsSecretRef.name", wantMessage: "should match",
		wantGo: `spec.store.redis.credentialsSecretRef.name: Invalid value: "Quota_Redis": must be a Secret name`,
	},
	"an address without a port is rejected by Go": {
		patch:  `store: {redis: {address: "redis.svc"}}`,
		wantGo: `spec.store.redis.address: Invalid value: "redis.svc": must be host:port, such as redis.retry-operator-system.svc:6379, 10.0.0.7:6379 or [fd00::7]:6379`,
	},
	"an address with port 0 is rejected by Go": {
		patch:  `store: {redis: {address: "redis.svc:0"}}`,
		wantGo: `spec.store.redis.address: Invalid value: "redis.svc:0": port "0" must be between 1 and 65535`,
	},
	"a namespaceSelector with a bad operator is rejected by Go": {
		patch:  `consumers: {namespaceSelector: {matchExpressions: [{key: team, operator: Like, values: [a]}]}}`,
		wantGo: `spec.consumers.namespaceSelector.matchExpressions[0].operator: Invalid value: "Like": not a valid selector operator`,
	},
}

// A valid SharedQuota is stored with the defaults SetSharedQuotaDefaults
// applies, and the API server accepts it as ValidateSharedQuota does.
func TestAPIServerSharedQuotaDefaultsMatchGoDefaults(t *testing.T) {
	cl, _ := startAPIServer(t)
	for name, patch := range map[string]string{
		"a minimal quota gets burst 1 and onStoreLoss LastShare": "",
		"a quota with every field is stored as written": `
requestsPerMinute: null
requestsPerSecond: 1000
burst: 20
concurrency: 3
consumers: {namespaceSelector: {matchLabels: {team: payments}}}
store: {redis: {address: "[fd00::7]:6379", credentialsSecretRef: {name: quota-redis}}}
onStoreLoss: Deny`,
		"an empty namespaceSelector is kept (it admits every namespace)": `consumers: {namespaceSelector: {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			obj := buildQuota(t, fmt.Sprintf("valid-%d", len(patch)), patch)
			want := toTypedQuota(t, obj)
			v1alpha1.SetSharedQuotaDefaults(want)
			if errs := v1alpha1.ValidateSharedQuota(want); len(errs) > 0 {
				t.Fatalf("ValidateSharedQuota rejects it: %v", errs.ToAggregate())
			}
			if err := cl.Create(context.Background(), obj, client.FieldValidation("Strict")); err != nil {
				t.Fatalf("the API server rejected a valid quota: %v", err)
			}
			t.Cleanup(func() { _ = cl.Delete(context.Background(), obj) })
			got := &v1alpha1.SharedQuota{}
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
				t.Fatal(err)
			}
			if got.Namespace != "" {
				t.Errorf("a SharedQuota is cluster-scoped; got namespace %q", got.Namespace)
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				t.Errorf("stored spec differs from Go defaults (-go +apiserver):\n%s", diff)
			}
		})
	}
}

func buildQuota(t *testing.T, name, patch string) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	if err := yaml.Unmarshal([]byte(validQuotaSpec), &spec); err != nil {
		t.Fatal(err)
	}
	p := map[string]any{}
	if err := yaml.Unmarshal([]byte(patch), &p); err != nil {
		t.Fatalf("bad test YAML %q: %v", patch, err)
	}
	for k, v := range p {
		if v == nil {
			delete(spec, k)
		} else {
			spec[k] = v
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "SharedQuota",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

func toTypedQuota(t *testing.T, u *unstructured.Unstructured) *v1alpha1.SharedQuota {
	t.Helper()
	q := &v1alpha1.SharedQuota{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, q); err != nil {
		t.Fatalf("cannot decode into the Go type: %v", err)
	}
	return q
}
