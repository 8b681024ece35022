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
	for _, s := range policysettest.VerdictSeeds {
		f.Add(s, []byte(nil), uint8(0), uint8(0), uint8(0))
	}
	for i := range policysettest.Selectors {
		f.Add(`{}`, []byte(nil), uint8(0), uint8(0), uint8(i+1))
	}
	for _, shape := range policysettest.ShapeSeeds {
		f.Add(`{}`, []byte(nil), uint8(0), shape, uint8(0))
	}
	f.Add(`{}`, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, uint8(3), uint8(0), uint8(0))
	f.Add(`{}`, []byte{255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240, 239, 238}, uint8(1), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, patch string, choices []byte, readyPods, shape, selector uint8) {
		u, ok := policysettest.Upstream(patch, choices)
		if !ok {
			t.Skip("the patch is not a JSON object")
		}
		v, decoded := policysettest.LocalVerdicts(policysettest.WithSelector(
			policysettest.PolicyObject("ns", "p", policysettest.Upstreams(u, shape)...), int(selector)), int32(readyPods))
		if !decoded {
			t.Skip("does not decode into the Go types")
		}
		if (v.Validate == nil) != (v.Sidecar == nil) {
			t.Fatalf("verdicts differ for %v:\n  v1alpha1.Validate: %v\n  sidecar:           %v", u, v.Validate, v.Sidecar)
		}
		if v.Meaning != "" {
			t.Fatalf("%v: %s", u, v.Meaning)
		}
	})
}
