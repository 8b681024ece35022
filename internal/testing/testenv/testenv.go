// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) for tests, from the binaries hack/kube-binaries.sh builds from source.
// Nothing is downloaded: when the binaries are missing the test fails and says
// which command builds them.
package testenv

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version the project pins (k8s.io/* v0.37.x).
const KubeVersion = "v1.37.2"

// ModuleRoot is the repository root, found from this file's location.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
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

// SidecarClusterRole is config/rbac/sidecar_role.yaml, the injected sidecars'
// read access, named as it is installed (name: after config/default's
// namePrefix).
func SidecarClusterRole(t testing.TB, name string) *rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ModuleRoot(), "config", "rbac", "sidecar_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatalf("config/rbac/sidecar_role.yaml: %v", err)
	}
	role.Name = name
	return &role
}

// ServiceAccountToken creates service account ns/name (if missing) and returns
// a token for it from the TokenRequest API, bound to the API server's audience:
// what the kubelet projects into a pod.
func ServiceAccountToken(t testing.TB, cfg *rest.Config, ns, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// TokenConfig is cfg authenticated by token alone: what a pod holding it may do.
func TokenConfig(cfg *rest.Config, token string) *rest.Config {
	return &rest.Config{Host: cfg.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
}

// ManagerConfig is cfg as the manager's service account ns/controller-manager
// with exactly the rights config/rbac grants it: the ClusterRole of
// config/rbac/role.yaml (generated from the +kubebuilder:rbac markers) and
// the leader-election Role of config/rbac/leader_election_role.yaml in ns,
// both bound as config/rbac binds them. A manager built on it fails where the
// installed one would be forbidden.
func ManagerConfig(t testing.TB, cfg *rest.Config, ns string) *rest.Config {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const sa = "controller-manager"
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	var role rbacv1.ClusterRole
	readRBAC(t, "role.yaml", &role)
	role.Name = "retry-operator-manager-role"
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var election rbacv1.Role
	readRBAC(t, "leader_election_role.yaml", &election)
	election.Name, election.Namespace = "retry-operator-leader-election-role", ns
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &election, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: election.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: election.Name},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var quotaAdmin rbacv1.Role
	readRBAC(t, "quota_admin_secret_role.yaml", &quotaAdmin)
	quotaAdmin.Name, quotaAdmin.Namespace = "retry-operator-quota-admin-secret-role", ns
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &quotaAdmin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: quotaAdmin.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: quotaAdmin.Name},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return TokenConfig(cfg, ServiceAccountToken(t, cfg, ns, sa))
}

// readRBAC decodes config/rbac/<file> into obj.
func readRBAC(t testing.TB, file string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ModuleRoot(), "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, obj); err != nil {
		t.Fatalf("config/rbac/%s: %v", file, err)
	}
}
