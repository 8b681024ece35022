package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDecodeStrictNamesTheFieldPathAndTheNearestField(t *testing.T) {
	const head = "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - name: up\n    hosts: [a.example]\n"
	tests := map[string]struct {
		doc  string
		want string // "" : decodes
	}{
		"a valid policy decodes": {
			doc: head + "    maxAttempts: 3\n",
		},
		"a misspelt upstream field names its path and the field meant": {
			doc:  head + "    maxAtempts: 3\n",
			want: "spec.upstreams[0].maxAtempts: unknown field; did you mean maxAttempts?",
		},
		"a field in the wrong case is unknown, as for the API server": {
			doc:  head + "    maxattempts: 3\n",
			want: "spec.upstreams[0].maxattempts: unknown field; did you mean maxAttempts?",
		},
		"a misspelt field of the second upstream names index 1": {
			doc:  head + "  - name: up2\n    hosts: [b.example]\n    backoff: {bsae: 10ms}\n",
			want: "spec.upstreams[1].backoff.bsae: unknown field; did you mean base?",
		},
		"a misspelt metadata field is found through the embedded ObjectMeta": {
			doc:  "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p, namespce: x}\n",
			want: "metadata.namespce: unknown field; did you mean namespace?",
		},
		"a misspelt top-level field is found through the inlined TypeMeta": {
			doc:  "apiVersion: policy.retry.dev/v1alpha1\nknd: RetryPolicy\n",
			want: "knd: unknown field; did you mean kind?",
		},
		"a field nothing is close to lists the fields of its object": {
			doc:  head + "  - name: up2\n    hosts: [b.example]\n    backoff: {colour: red}\n",
			want: "spec.upstreams[1].backoff.colour: unknown field; the fields here are base, max, jitter",
		},
		"two unknown fields are both named": {
			doc:  head + "    maxAtempts: 3\n    perTryTimout: 1s\n",
			want: "spec.upstreams[0].maxAtempts: unknown field; did you mean maxAttempts?; spec.upstreams[0].perTryTimout: unknown field; did you mean perTryTimeout?",
		},
		"a duplicate field names its path": {
			doc:  "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec: {upstreams: [{name: a, name: b}]}\n",
			want: `error converting YAML to JSON: yaml: unmarshal errors:` + "\n" + `  line 4: key "name" already set in map`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p RetryPolicy
			err := DecodeStrict([]byte(tc.doc), &p)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("DecodeStrict:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDecodeStrictSuggestsTheFieldsOfAConfigMap(t *testing.T) {
	var cm corev1.ConfigMap
	err := DecodeStrict([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca}\ndata: {ca.crt: x}\nbinaryDate: {}\n"), &cm)
	if want := "binaryDate: unknown field; did you mean binaryData?"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}
