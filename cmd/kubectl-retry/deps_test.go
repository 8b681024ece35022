package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoController: the plugin reads what the API says (conditions,
// reasons and names live in api/v1alpha1); it never links the manager's
// controller, whose internals may change freely.
func TestImportsNoController(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/retrydev/retry-operator/internal/controller" || strings.HasPrefix(p, "github.com/retrydev/retry-operator/internal/controller/") {
			t.Errorf("kubectl-retry imports %s; read the vocabulary from api/v1alpha1", p)
		}
	}
}
