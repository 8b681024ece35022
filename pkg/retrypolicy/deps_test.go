package retrypolicy

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsNoKubernetes keeps the promise of docs/library.md: a program
// that imports pkg/retrypolicy or any package under it (tests aside) pulls in
// the standard library, golang.org/x/time/rate and nothing else, in particular
// nothing from k8s.io or sigs.k8s.io.
func TestImportsNoKubernetes(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr)
	}
	const own = "github.com/retrydev/retry-operator/pkg/retrypolicy"
	// The field rules Compile shares with the API, the runtime state of an
	// upstream, the Not-Before notation, the header parsers and the contract
	// with an upstream client: held to the same imports as the library itself.
	const internal = "github.com/retrydev/retry-operator/internal/"
	ownInternal := []string{internal + "rules", internal + "admission", internal + "notbefore",
		internal + "httpdate", internal + "ratelimitheader", internal + "innerclient"}
	var kubernetes, thirdParty []string
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/"):
			kubernetes = append(kubernetes, p)
			thirdParty = append(thirdParty, p)
		case p == own || strings.HasPrefix(p, own+"/") || slices.Contains(ownInternal, p):
		default:
			thirdParty = append(thirdParty, p)
		}
	}
	if len(kubernetes) > 0 {
		t.Errorf("pkg/retrypolicy/... depends on Kubernetes packages: %v", kubernetes)
	}
	slices.Sort(thirdParty)
	if want := []string{"golang.org/x/time/rate"}; !slices.Equal(thirdParty, want) {
		t.Errorf("pkg/retrypolicy/... depends on %v outside the standard library, want exactly %v (update docs/library.md if this is deliberate)", thirdParty, want)
	}
}
