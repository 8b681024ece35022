//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// The install a platform team does (README.md, "On your cluster"): with
// E2E_INSTALL=readme (hack/test-e2e.sh local sets it) the suite runs the
// README's block exactly as written — build and push the images to the local
// registry, helm install the chart with them, opt a namespace in, apply a
// sample, watch PROGRAMMED-PODS reach 1 — and every other case then runs on
// that Helm release. The lifecycle cases at the end upgrade it with changed
// values and uninstall it.

const (
	helmRelease = "retry-operator"
	// The README's names: its namespace, sample policy and app.
	readmeNamespace = "shop"
	readmePolicy    = "partner-payments"
	readmeApp       = "checkout"
	// readmeMarker precedes the README block the suite runs.
	readmeMarker = "<!-- e2e: test/e2e/onyourcluster_test.go runs the next block exactly as written -->"
)

// readmeInstall reports whether the suite installs by the README.
func readmeInstall() bool { return os.Getenv("E2E_INSTALL") == "readme" }

// readmeBlock is the shell block of README.md that follows readmeMarker.
func readmeBlock(t *testing.T, root string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), readmeMarker)
	if !ok {
		t.Fatalf("README.md has no %q", readmeMarker)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("README.md: no ```sh block after the e2e marker")
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("README.md: the e2e block is not closed")
	}
	return block
}

// installFromReadme removes what a previous run or `make demo` left (a
// release, an install from dist/, the README's namespace), then runs the
// README block in bash with a user's environment: REGISTRY the local
// registry, a TAG of its own (a new build is a new reference, so the node
// pulls it), the pause image as the app, helm and kubectl on PATH.
func (s *suite) installFromReadme(t *testing.T) {
	t.Helper()
	registry := os.Getenv("E2E_REGISTRY")
	if registry == "" {
		t.Fatal("E2E_INSTALL=readme needs E2E_REGISTRY (hack/test-e2e.sh local sets it)")
	}
	s.removePreviousInstall(t)
	tag := fmt.Sprintf("e2e-%d", time.Now().Unix())
	block := readmeBlock(t, s.root)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = s.root
	cmd.Env = append(userEnv(),
		"PATH="+s.toolsDir(t)+":"+os.Getenv("PATH"),
		"REGISTRY="+registry, "TAG="+tag, "APP_IMAGE="+appImage)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("README.md \"On your cluster\" (REGISTRY=%s TAG=%s APP_IMAGE=%s), %s:\n%s", registry, tag, appImage, time.Since(start).Round(100*time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("the README block failed: %v", err)
	}
	// The suite's image checks compare with what the README installed.
	t.Setenv("E2E_IMG", registry+"/retry-operator/manager:"+tag)
	t.Setenv("E2E_SIDECAR_IMG", registry+"/retry-operator/retry-sidecar:"+tag)
	t.Cleanup(func() { s.deleteNamespace(t, readmeNamespace) })
}

// appImage is the README's APP_IMAGE here: the node's pause image, which is
// on every node of the local cluster and keeps running.
const appImage = "retry.dev/pause:3.10"

// userEnv is this process's environment without what the outer make passes
// down: the README runs as from a user's shell.
func userEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PATH", "IMG", "SIDECAR_IMG", "REGISTRY", "TAG", "APP_IMAGE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// toolsDir is a directory with helm (HELM) and kubectl (the suite's) under
// their plain names, as a user has them on PATH.
func (s *suite) toolsDir(t *testing.T) string {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("E2E_INSTALL=readme needs HELM, the helm binary (make test-e2e sets it)")
	}
	dir := t.TempDir()
	for name, target := range map[string]string{"helm": helm, "kubectl": s.kubectl} {
		abs, err := exec.LookPath(target)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if abs, err = filepath.Abs(abs); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func (s *suite) helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Getenv("HELM"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// removePreviousInstall makes room for `helm install`: a release of an
// earlier run is uninstalled; an operator installed from dist/ (make demo, an
// E2E_INSTALL=file run) is deleted, CRD included; the README's namespace goes.
func (s *suite) removePreviousInstall(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if strings.Contains(s.helm(t, "list", "--namespace", operatorNamespace, "--short"), helmRelease) {
		t.Logf("uninstalling the release %s of an earlier run", helmRelease)
		s.helm(t, "uninstall", helmRelease, "--namespace", operatorNamespace, "--wait")
	}
	var d appsv1.Deployment
	err := s.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeployment}, &d)
	if err == nil && d.Annotations["meta.helm.sh/release-name"] == "" {
		t.Logf("deleting the operator installed from %s (not a Helm release)", installFile)
		s.kubectlOut(t, nil, "delete", "-f", filepath.Join(s.root, installFile), "--ignore-not-found", "--wait")
		s.deleteNamespace(t, operatorNamespace)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	s.deleteNamespace(t, readmeNamespace)
}

// readmePolicyProgrammed: the README's policy is Accepted and Programmed and
// its sidecars run generation gen on want pods.
func (s *suite) readmePolicyProgrammed(t *testing.T, want int32, timeout time.Duration) *v1alpha1.RetryPolicy {
	t.Helper()
	var p v1alpha1.RetryPolicy
	s.eventually(t, timeout, fmt.Sprintf("%s/%s programmed on %d pods", readmeNamespace, readmePolicy, want), func() (bool, string) {
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: readmeNamespace, Name: readmePolicy}, &p); err != nil {
			return false, err.Error()
		}
		acc := meta.IsStatusConditionTrue(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		prog := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionProgrammed))
		ok := acc && prog != nil && prog.Status == metav1.ConditionTrue && prog.ObservedGeneration == p.Generation &&
			p.Status.ProgrammedPods == want && p.Status.SelectedPods == want
		return ok, fmt.Sprintf("generation %d, accepted %v, programmed %+v, %d/%d pods", p.Generation, acc, prog, p.Status.ProgrammedPods, p.Status.SelectedPods)
	})
	return &p
}

// readmeInstallWorks: what the README promises after its last line — and
// that a policy edit reaches the Helm-installed sidecar within 5 s, which
// needs the sidecars' ClusterRole the chart once lacked (without it the
// sidecar falls back to the 60-90 s file sync).
func (s *suite) readmeInstallWorks(t *testing.T) {
	s.readmePolicyProgrammed(t, 1, 30*time.Second)
	out := string(s.kubectlOut(t, nil, "get", "retrypolicies", "-n", readmeNamespace))
	t.Logf("kubectl get retrypolicies -n %s:\n%s", readmeNamespace, out)
	if !strings.Contains(out, "PROGRAMMED-PODS") {
		t.Errorf("no PROGRAMMED-PODS column in:\n%s", out)
	}
	s.editReadmePolicyPropagates(t, 1)
}

// editReadmePolicyPropagates edits maxAttempts of the README's policy and
// measures until every one of pods sidecars reports the new generation.
func (s *suite) editReadmePolicyPropagates(t *testing.T, pods int32) {
	t.Helper()
	ctx := context.Background()
	var p v1alpha1.RetryPolicy
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: readmeNamespace, Name: readmePolicy}, &p); err != nil {
		t.Fatal(err)
	}
	next := int32(3)
	if ptr.Deref(p.Spec.Upstreams[0].MaxAttempts, 0) == next {
		next = 4
	}
	p.Spec.Upstreams[0].MaxAttempts = ptr.To(next)
	start := time.Now()
	if err := s.c.Update(ctx, &p); err != nil {
		t.Fatalf("editing %s: %v", readmePolicy, err)
	}
	s.readmePolicyProgrammed(t, pods, 5*time.Second)
	took := time.Since(start)
	s.propagate = append(s.propagate, took)
	t.Logf("maxAttempts %d: programmed on %d/%d pods %s after the edit", next, pods, pods, took.Round(time.Millisecond))
}

// helmUpgradeKeepsPolicies: `helm upgrade --reuse-values` with changed values
// (one replica, debug logs) rolls the manager; the policy stays applied on the
// running pod, a new pod is injected, and an edit reaches both.
func (s *suite) helmUpgradeKeepsPolicies(t *testing.T) {
	ctx := context.Background()
	s.helm(t, "upgrade", helmRelease, filepath.Join(s.root, "dist", "chart"), "--namespace", operatorNamespace,
		"--reuse-values", "--set", "replicaCount=1", "--set", "logLevel=debug", "--wait")
	var d appsv1.Deployment
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeployment}, &d); err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(d.Spec.Replicas, 0); got != 1 {
		t.Errorf("manager replicas %d after the upgrade, want 1", got)
	}
	if args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "debug") {
		t.Errorf("manager args %q after logLevel=debug", args)
	}
	s.waitManagerReady(t, 3*time.Minute)
	s.readmePolicyProgrammed(t, 1, 30*time.Second)

	scale := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: readmeApp, Namespace: readmeNamespace}}
	if err := s.c.Patch(ctx, scale, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))); err != nil {
		t.Fatalf("scaling %s to 2: %v", readmeApp, err)
	}
	s.readmePolicyProgrammed(t, 2, 2*time.Minute)
	s.editReadmePolicyPropagates(t, 2)
}

// helmUninstallKeepsTheCRD: `helm uninstall` removes the manager and the
// RoleBindings it created (owned by the sidecars' ClusterRole, so the garbage
// collector takes them), and keeps the CRD and every policy.
func (s *suite) helmUninstallKeepsTheCRD(t *testing.T) {
	ctx := context.Background()
	bindings := s.sidecarBindings(t)
	if len(bindings) == 0 {
		t.Fatal("no retry-sidecar RoleBinding before the uninstall")
	}
	s.helm(t, "uninstall", helmRelease, "--namespace", operatorNamespace, "--wait")
	start := time.Now()
	s.eventually(t, time.Minute, "the manager's RoleBindings to be gone", func() (bool, string) {
		left := s.sidecarBindings(t)
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
	t.Logf("%d RoleBindings (%v) removed %s after helm uninstall returned", len(bindings), bindings, time.Since(start).Round(100*time.Millisecond))

	if out, err := s.kubectlRun(nil, "get", "crd", "retrypolicies."+v1alpha1.GroupName); err != nil {
		t.Errorf("the CRD after helm uninstall: %v\n%s", err, out)
	}
	var p v1alpha1.RetryPolicy
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: readmeNamespace, Name: readmePolicy}, &p); err != nil {
		t.Errorf("the README's policy after helm uninstall: %v", err)
	}
	var d appsv1.Deployment
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeployment}, &d); !apierrors.IsNotFound(err) {
		t.Errorf("the manager Deployment after helm uninstall: %v, want not found", err)
	}
}

// sidecarBindings are the namespaces holding the manager's RoleBinding.
func (s *suite) sidecarBindings(t *testing.T) []string {
	t.Helper()
	var list rbacv1.RoleBindingList
	if err := s.c.List(context.Background(), &list, client.MatchingFields{"metadata.name": "retry-sidecar"}); err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, rb := range list.Items {
		ns = append(ns, rb.Namespace)
	}
	return ns
}

// freshInstalls is E2E_FRESH_INSTALLS, 20 unless set (0 skips the case).
func freshInstalls() int {
	n, err := strconv.Atoi(os.Getenv("E2E_FRESH_INSTALLS"))
	if err != nil {
		return 20
	}
	return n
}

// freshInstallsAdmitAtOnce installs the chart n times from nothing (the
// images the README pushed), and right after each `helm install --wait`
// returns, creates a policy with `kubectl apply`, as a platform team's first
// minute does; then uninstalls. Before the startupapicheck hook, 5 of 15
// such applies were refused ("failed calling webhook … connect: connection
// refused": pods Ready, the Service not routing yet). With hook false the
// same loop runs without it and reports, without failing, how many applies
// were refused (docs/operations.md#when-is-it-ready).
func (s *suite) freshInstallsAdmitAtOnce(t *testing.T, n int, hook bool) {
	img, sidecar := os.Getenv("E2E_IMG"), os.Getenv("E2E_SIDECAR_IMG")
	if img == "" || sidecar == "" {
		t.Skip("needs the images the README pushed (E2E_INSTALL=readme)")
	}
	repo, tag := img[:strings.LastIndex(img, ":")], img[strings.LastIndex(img, ":")+1:]
	srepo, stag := sidecar[:strings.LastIndex(sidecar, ":")], sidecar[strings.LastIndex(sidecar, ":")+1:]
	if strings.Contains(s.helm(t, "list", "--namespace", operatorNamespace, "--short"), helmRelease) {
		s.helm(t, "uninstall", helmRelease, "--namespace", operatorNamespace, "--wait")
	}
	var refused []string
	var installs []time.Duration
	for i := range n {
		start := time.Now()
		s.helm(t, "install", helmRelease, filepath.Join(s.root, "dist", "chart"), "--namespace", operatorNamespace,
			"--create-namespace", "--wait", "--timeout", "5m",
			"--set", "image.manager.repository="+repo, "--set", "image.manager.tag="+tag,
			"--set", "image.sidecar.repository="+srepo, "--set", "image.sidecar.tag="+stag,
			"--set", "certificates.mode=self-signed", "--set", fmt.Sprintf("startupapicheck.enabled=%t", hook))
		installs = append(installs, time.Since(start))
		name := fmt.Sprintf("fresh-install-%d", i)
		policy := fmt.Sprintf(`{"apiVersion":"%s","kind":"RetryPolicy","metadata":{"name":%q,"namespace":%q},
			"spec":{"upstreams":[{"name":"api","hosts":["fresh-install.example"]}]}}`, v1alpha1.GroupVersion, name, readmeNamespace)
		if out, err := s.kubectlRun([]byte(policy), "apply", "-f", "-"); err != nil {
			refused = append(refused, fmt.Sprintf("install %d: %s", i+1, strings.TrimSpace(string(out))))
		} else {
			s.kubectlOut(t, nil, "delete", "retrypolicy", name, "-n", readmeNamespace, "--wait")
		}
		s.helm(t, "uninstall", helmRelease, "--namespace", operatorNamespace, "--wait")
	}
	slices.Sort(installs)
	t.Logf("%d fresh installs (hook %v): %d applies admitted at once, %d refused; helm install --wait took %s to %s (median %s)",
		n, hook, n-len(refused), len(refused), installs[0].Round(100*time.Millisecond),
		installs[len(installs)-1].Round(100*time.Millisecond), installs[len(installs)/2].Round(100*time.Millisecond))
	for _, r := range refused {
		t.Log(r)
	}
	if hook && len(refused) > 0 {
		t.Errorf("%d of %d applies right after helm install --wait were refused; want none", len(refused), n)
	}
}
