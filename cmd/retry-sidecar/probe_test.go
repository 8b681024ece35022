package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The kubelet probes the loopback-only admin endpoints by exec'ing the binary.
func TestProbeModeReportsAdminEndpoints(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: p}\nspec:\n  upstreams:\n  - {name: a, hosts: [a.svc]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, "--policy-file="+policy)
	tests := map[string]struct {
		args     []string
		wantExit int
	}{
		"a ready sidecar passes the readiness probe": {args: []string{"http://" + s.admin + "/readyz"}, wantExit: 0},
		"a live sidecar passes the liveness probe":   {args: []string{"http://" + s.admin + "/healthz"}, wantExit: 0},
		"a missing endpoint fails":                   {args: []string{"http://" + s.admin + "/nothing-here"}, wantExit: 1},
		"a closed port fails":                        {args: []string{"--timeout=200ms", "http://127.0.0.1:1/readyz"}, wantExit: 1},
		"a non-loopback host is refused":             {args: []string{"http://192.0.2.1:15020/readyz"}, wantExit: 2},
		"a missing URL is a usage error":             {args: nil, wantExit: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := exec.Command(sidecarBin, append([]string{"probe"}, tc.args...)...).Run()
			got := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				got = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantExit {
				t.Fatalf("exit %d, want %d", got, tc.wantExit)
			}
		})
	}
}
