package policysettest

import (
	"encoding/json"
	"fmt"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	kjson "sigs.k8s.io/json"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// PolicyObject is a RetryPolicy ns/name with the given upstreams, as the
// unstructured object a user would apply.
func PolicyObject(ns, name string, upstreams ...map[string]any) map[string]any {
	ups := make([]any, len(upstreams))
	for i, u := range upstreams {
		ups[i] = u
	}
	return map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "RetryPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"upstreams": ups},
	}
}

// Selectors are podSelectors for WithSelector: valid ones and ones that are
// not label selectors at all.
var Selectors = []map[string]any{
	{},
	{"matchLabels": map[string]any{"app": "checkout"}},
	{"matchExpressions": []any{map[string]any{"key": "app", "operator": "NotIn", "values": []any{"a", "b"}}}},
	{"matchLabels": map[string]any{"app": "not valid!"}},
	{"matchLabels": map[string]any{"bad key!": "x"}},
	{"matchExpressions": []any{map[string]any{"key": "app", "operator": "In", "values": []any{}}}},
	{"matchExpressions": []any{map[string]any{"key": "app", "operator": "Exists", "values": []any{"a"}}}},
	{"matchExpressions": []any{map[string]any{"key": "app", "operator": "Near"}}},
}

// WithSelector sets obj's spec.podSelector to Selectors[i-1]; i = 0 (or out of
// range) leaves it absent.
func WithSelector(obj map[string]any, i int) map[string]any {
	if i > 0 && i <= len(Selectors) {
		obj["spec"].(map[string]any)["podSelector"] = Selectors[i-1]
	}
	return obj
}

// Verdicts is what the Go layers say about one policy object.
type Verdicts struct {
	// Validate is v1alpha1.Validate's verdict after SetDefaults (what the
	// webhook and the reconciler run); nil = accepted.
	Validate error
	// Sidecar is the verdict of the manager's rendering as every sidecar reads
	// it: policyset.FromRetryPolicy, Marshal, Unmarshal, Select and
	// CompileUpstreams (ToConfig, retrypolicy.Compile, NewSet); nil = accepted.
	Sidecar error
	// Meaning, when both accept, differs from "" if the Config a sidecar
	// compiles from the ConfigMap differs from the one of the rendering before
	// it went through JSON: the document lost part of the policy.
	Meaning string
}

// LocalVerdicts asks v1alpha1.Validate and the sidecar's compilation about obj
// (a PolicyObject), rendered for readyPods ready pods. decoded is false when
// obj does not decode strictly into the Go types (the API server refuses such
// an object for its types or unknown fields; no Go layer ever sees it).
func LocalVerdicts(obj map[string]any, readyPods int32) (v Verdicts, decoded bool) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return v, false
	}
	var p v1alpha1.RetryPolicy
	strict, err := kjson.UnmarshalStrict(raw, &p, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil || len(strict) > 0 {
		return v, false
	}
	v1alpha1.SetDefaults(&p)
	if errs := v1alpha1.Validate(&p); len(errs) > 0 {
		v.Validate = errs.ToAggregate()
	}
	rendered, err := policyset.FromRetryPolicy(&p, readyPods)
	if err != nil {
		v.Sidecar = err
		return v, true
	}
	data, err := policyset.Marshal(policyset.Document{Policies: []policyset.Policy{rendered}})
	if err != nil {
		v.Sidecar = err
		return v, true
	}
	doc, err := policyset.Unmarshal(data)
	if err != nil {
		v.Sidecar = err
		return v, true
	}
	// A pod with labels makes the sidecar read the selector; every policy is
	// then compiled, as for a pod it selects.
	if _, err := policyset.Select(doc, map[string]string{}); err != nil {
		v.Sidecar = err
		return v, true
	}
	selected, err := policyset.Select(doc, nil)
	if err != nil {
		v.Sidecar = err
		return v, true
	}
	set, _, err := policyset.CompileUpstreams(selected)
	if err != nil {
		v.Sidecar = err
		return v, true
	}
	if v.Validate == nil {
		for i, cp := range set.Policies() {
			direct, err := policyset.ToConfig(rendered.Upstreams[i])
			if err != nil {
				v.Meaning = fmt.Sprintf("upstream %d: the rendering before JSON does not convert: %v", i, err)
				break
			}
			if diff := cmp.Diff(direct, cp.Config(), cmpopts.EquateEmpty()); diff != "" {
				v.Meaning = fmt.Sprintf("upstream %d: the sidecar's config differs from the rendering's (-rendered +sidecar):\n%s", i, diff)
				break
			}
		}
	}
	return v, true
}
