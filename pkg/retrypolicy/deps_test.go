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
// nothing from k8s.io or sigs.k8s.io. The one exception is retrygrpc, the
// gRPC interceptor, which adds grpc-go and what grpc-go imports, and still
// nothing of Kubernetes.
func TestImportsNoKubernetes(t *testing.T) {
	const own = "github.com/retrydev/retry-operator/pkg/retrypolicy"
	const grpcPackage = own + "/retrygrpc"
	var core []string
	for _, p := range goList(t, "./...") {
		if p != grpcPackage {
			core = append(core, p)
		}
	}
	if kubernetes, thirdParty := foreignDeps(t, core...); len(kubernetes) > 0 || !slices.Equal(thirdParty, []string{"golang.org/x/time/rate"}) {
		t.Errorf("pkg/retrypolicy/... but retrygrpc depends on Kubernetes packages %v and on %v outside the standard library, want exactly [golang.org/x/time/rate] (update docs/library.md if this is deliberate)",
			kubernetes, thirdParty)
	}
	grpcModules := []string{"golang.org/x/time/", "google.golang.org/grpc", "google.golang.org/protobuf/", "google.golang.org/genproto/",
		"golang.org/x/net/", "golang.org/x/sys/", "golang.org/x/text/"}
	kubernetes, thirdParty := foreignDeps(t, grpcPackage)
	if len(kubernetes) > 0 {
		t.Errorf("retrygrpc depends on Kubernetes packages: %v", kubernetes)
	}
	for _, p := range thirdParty {
		if !slices.ContainsFunc(grpcModules, func(m string) bool { return strings.HasPrefix(p, m) }) {
			t.Errorf("retrygrpc depends on %s, outside grpc-go's own dependencies %v", p, grpcModules)
		}
	}
}

// foreignDeps are the dependencies of pkgs outside the standard library and
// this module's own (pkg/retrypolicy and the internal packages it shares):
// those of Kubernetes, and all of them.
func foreignDeps(t *testing.T, pkgs ...string) (kubernetes, thirdParty []string) {
	t.Helper()
	const own = "github.com/retrydev/retry-operator/pkg/retrypolicy"
	// The field rules Compile shares with the API, the HTTP-date and
	// RateLimit header parsers and the sidecar's hooks: held to the same
	// imports as the library itself.
	const internal = "github.com/retrydev/retry-operator/internal/"
	ownInternal := []string{internal + "rules",
		internal + "httpdate", internal + "ratelimitheader", internal + "libhooks"}
	args := append([]string{"-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	for _, p := range goList(t, args...) {
		switch {
		case strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/"):
			kubernetes = append(kubernetes, p)
			thirdParty = append(thirdParty, p)
		case p == own || strings.HasPrefix(p, own+"/") || slices.Contains(ownInternal, p):
		default:
			thirdParty = append(thirdParty, p)
		}
	}
	slices.Sort(thirdParty)
	return kubernetes, thirdParty
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH: %v", err)
	}
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}
