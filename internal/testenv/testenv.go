// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) for tests, from the binaries hack/kube-binaries.sh builds from source.
// Nothing is downloaded: when the binaries are missing the test fails and says
// which command builds them.
package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVersion is the Kubernetes version the project pins (k8s.io/* v0.37.x).
const KubeVersion = "v1.37.2"

// ModuleRoot is the repository root, found from this file's location.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Assets returns the directory holding kube-apiserver, etcd and kubectl:
// $KUBEBUILDER_ASSETS when set, else bin/k8s/<KubeVersion> of the repository.
func Assets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(ModuleRoot(), "bin", "k8s", KubeVersion)
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("envtest binary %s missing in %s: build them with hack/kube-binaries.sh (or make test, which does)", b, dir)
		}
	}
	return dir
}

// CRDDir is config/crd/bases of the repository.
func CRDDir() string { return filepath.Join(ModuleRoot(), "config", "crd", "bases") }

// Start starts an API server with the project's CRDs installed and stops it when
// the test ends. env may carry extra options (webhooks); its BinaryAssetsDirectory
// and CRDDirectoryPaths are filled in.
func Start(t testing.TB, env *envtest.Environment) *rest.Config {
	t.Helper()
	if env == nil {
		env = &envtest.Environment{}
	}
	env.BinaryAssetsDirectory = Assets(t)
	env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, CRDDir())
	env.ErrorIfCRDPathMissing = true
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	return cfg
}
