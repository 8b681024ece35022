package policyset_test

import (
	"testing"

	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
)

// FuzzValidateAndCompileAgree: for any upstream, v1alpha1.Validate (the
// webhook's and the reconciler's verdict) and the sidecar's compilation of the
// manager's rendering agree on accept or reject, and an accepted upstream
// means the same to the sidecar after the ConfigMap's JSON as before. The
// rules both apply are pkg/retrypolicy's (docs/policy.md#where-the-rules-live).
// The API server joins in FuzzUpstreamVerdictsAgree (internal/webhook/v1alpha1).
func FuzzValidateAndCompileAgree(f *testing.F) {
	policysettest.AddSeeds(f)
	f.Fuzz(func(t *testing.T, patch string, choices []byte, readyPods, shape, selector uint8) {
		obj, ok := policysettest.Object("ns", patch, choices, shape, selector)
		if !ok {
			t.Skip("the patch is not a JSON object")
		}
		v, decoded := policysettest.LocalVerdicts(obj, int32(readyPods))
		if !decoded {
			t.Skip("does not decode into the Go types")
		}
		if (v.Validate == nil) != (v.Sidecar == nil) {
			t.Fatalf("verdicts differ for %v:\n  v1alpha1.Validate: %v\n  sidecar:           %v", obj["spec"], v.Validate, v.Sidecar)
		}
		if v.Meaning != "" {
			t.Fatalf("%v: %s", obj["spec"], v.Meaning)
		}
	})
}
