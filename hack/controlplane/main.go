// Command controlplane starts a real kube-apiserver and etcd (the binaries
// hack/kube-binaries.sh builds from source) with the project's CRDs installed,
// writes an admin kubeconfig, and runs until SIGINT/SIGTERM. It is the smallest
// real control plane: no kubelet, so no pods run; hack/local-cluster.sh starts a
// whole node.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	assets := flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver, etcd and kubectl")
	crds := flag.String("crds", "config/crd/bases", "directory of CRDs to install")
	kubeconfig := flag.String("write-kubeconfig", ".local-cluster/controlplane.kubeconfig", "where to write the admin kubeconfig")
	flag.Parse()

	env := &envtest.Environment{
		BinaryAssetsDirectory: *assets,
		CRDDirectoryPaths:     []string{*crds},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: starting kube-apiserver and etcd: %v\n", err)
		os.Exit(1)
	}
	code := run(env, *kubeconfig)
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: stopping: %v\n", err)
	}
	os.Exit(code)
}

func run(env *envtest.Environment, kubeconfig string) int {
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: adding admin user: %v\n", err)
		return 1
	}
	data, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: kubeconfig: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		return 1
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		return 1
	}
	fmt.Printf("controlplane: ready, kubeconfig %s (stop with SIGTERM)\n", kubeconfig)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return 0
}
