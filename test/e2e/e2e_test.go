//go:build e2e

// Package e2e is the end-to-end suite: the operator installed from the release
// artefact dist/install-selfsigned.yaml (no cert-manager needed) on
// a real cluster (KUBECONFIG), a RetryPolicy applied, and real traffic from an
// injected pod retried as the policy says. hack/test-e2e.sh runs it against the
// local single-node cluster, kind, or any existing cluster:
//
//	KUBECONFIG=... go test -tags e2e ./test/e2e/ -v -count=1 -timeout 20m
//
// The pods use the images of hack/build-images.sh (retry.dev/*:dev, the
// images dist/ names), so they must be on the node already (hack/local-cluster.sh
// and hack/kind.sh load them); on the local cluster the manager and the sidecar
// are pulled from its registry instead (registry_test.go). The test reaches the demo app through the API
// server's service proxy and measures retries at the upstream, which records the
// arrival time of every attempt. The README ("End to end") lists the cases.
//
// Environment: KUBECONFIG (required), KUBECTL (default: bin/k8s/<version>/kubectl,
// else kubectl on PATH), E2E_KEEP_NAMESPACE=1 keeps the test namespace for a
// look after the run, E2E_HELM=<helm binary> installs from dist/chart instead
// (`make test-e2e-chart`), E2E_IMG/E2E_SIDECAR_IMG/E2E_REGISTRY the pushed images
// to install (hack/test-e2e.sh local sets them).
package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/polltest"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

const (
	operatorNamespace = "retry-operator-system"
	managerDeployment = "retry-operator-controller-manager"
	sidecarName       = "retry-sidecar"
	statsPort         = 15090 // the sidecar's --stats-listen: /config and /metrics
	policyName        = "flaky-upstream"
	kubeVersion       = "v1.37.2"
)

// suite is the state the cases share: clients, the test namespace and the pods.
type suite struct {
	c         client.Client
	cs        *kubernetes.Clientset
	root      string // repository root
	kubectl   string
	ns        string
	upstream  string // authority of the flaky upstream: flaky-upstream.<ns>.svc
	appPod    corev1.Pod
	cases     int
	failed    []string
	propagate []time.Duration // policy edits to the sidecar's new revision
}

func TestEndToEnd(t *testing.T) {
	s := newSuite(t)
	start := time.Now()

	s.createNamespace(t)
	s.deployOperator(t)
	s.deployWorkloads(t)

	s.run(t, "the app pod has exactly one retry-sidecar, a native sidecar with the restricted security context", s.sidecarInjected)
	s.run(t, "the manager and the injected sidecar run the images pulled from the local registry", s.imagesPulledFromRegistry)
	if readmeInstall() {
		s.run(t, "README.md's \"On your cluster\", run as written: the chart installed with the pushed images, the sample Programmed on 1/1 pods, an edit on the pod within 5 s", s.readmeInstallWorks)
	}
	s.run(t, "a pod that opts out (retry.dev/inject=false) gets no sidecar", s.optedOutPod)
	s.run(t, "a pod in kube-system gets no sidecar even when it asks for one", s.kubeSystemPod)
	s.run(t, "the sidecar serves /metrics and /config on the pod IP, port retry-stats", s.statsPortOnPodIP)
	s.run(t, "with the leader killed in a burst of policy changes, the other replica takes the lease and every change is reconciled; pods are still injected", s.leaderKilled)
	s.run(t, "the policy is Accepted and Programmed and the ConfigMap holds it", s.configMapHoldsPolicy)
	s.run(t, "429 with Retry-After: 2 is retried no earlier than 2 s later, measured at the upstream, and succeeds", s.retryAfterHonoured)
	s.run(t, "503 then 200 is retried after a local backoff and succeeds", s.flakyRetried)
	s.run(t, "over TLS with a CA from a ConfigMap: the app calls http://, gets 429, waits Retry-After: 2, then 200", s.tlsRetryAfterHonoured)
	s.run(t, "429 with Retry-After: 120 comes back at once as deferred with X-Retry-Not-Before", s.longRetryAfterDeferred)
	s.run(t, "a POST without an Idempotency-Key is not replayed", s.postNotReplayed)
	s.run(t, "a POST with an Idempotency-Key is replayed with the same key up to maxAttempts", s.postWithKeyReplayed)
	s.run(t, "an outage (always 503) stops after maxAttempts (4) transmissions", s.outageBounded)
	s.run(t, "an injected gRPC app in transparent mode: UNAVAILABLE and RESOURCE_EXHAUSTED retried in Trailers-Only and after headers, pushback honoured, a non-replayable method sent once, counted at the upstream", s.grpcRetried)
	s.run(t, "editing maxAttempts 4 to 2 reaches the running sidecar without a pod restart within 5 s, over 5 edits", s.policyEditPropagates)
	s.run(t, "the RetryPolicy status reaches 1/1 pods run the edited generation", s.statusCountsProgrammedPods)
	s.run(t, "invalid edits are rejected by the API server and the running behaviour is unchanged", s.invalidEditRejected)
	s.run(t, "two namespaces share one SharedQuota kept in Redis from Debian's package: the upstream sees its rate within ±2 %, never more than rate × t + burst, and both namespaces are served", s.sharedQuota)
	s.run(t, "with the API server restarted, the sidecar keeps its configuration, its watch resumes and a rendered edit arrives within 5 s", s.apiServerRestarted)
	s.run(t, "with the sidecar container killed, requests in flight fail, none reaches the upstream twice, and the restarted sidecar serves again", s.sidecarKilled)
	s.run(t, "with the API access removed the sidecar follows the mounted file", s.fileFallback)
	if n, _ := strconv.Atoi(os.Getenv("E2E_FLEET_PODS")); n > 0 {
		s.run(t, fmt.Sprintf("a policy edit reaches %d injected pods (propagation p50/p99)", n), func(t *testing.T) { s.fleetPropagation(t, n) })
	}
	s.run(t, "with the operator scaled to zero, pods are still created (failurePolicy Ignore) and policies are refused (Fail)", s.operatorDown)
	if readmeInstall() {
		s.run(t, "helm upgrade with changed values (1 replica, debug logs) keeps the policy applied, injects a new pod and an edit reaches both within 5 s", s.helmUpgradeKeepsPolicies)
		s.run(t, "helm uninstall removes the manager and its RoleBindings and keeps the CRD and the policies", s.helmUninstallKeepsTheCRD)
		if n := freshInstalls(); n > 0 {
			s.run(t, fmt.Sprintf("%d fresh helm install --wait, each followed at once by kubectl apply of a policy: every apply admitted", n),
				func(t *testing.T) { s.freshInstallsAdmitAtOnce(t, n, true) })
		}
		if n, _ := strconv.Atoi(os.Getenv("E2E_FRESH_INSTALLS_WITHOUT_HOOK")); n > 0 {
			s.run(t, fmt.Sprintf("%d fresh installs without the startupapicheck hook (the failure it prevents, reported)", n),
				func(t *testing.T) { s.freshInstallsAdmitAtOnce(t, n, false) })
		}
	}

	t.Logf("e2e: %d cases, %d passed, %d failed, in %s", s.cases, s.cases-len(s.failed), len(s.failed), time.Since(start).Round(time.Second))
	for _, f := range s.failed {
		t.Logf("e2e: FAILED: %s", f)
	}
	if len(s.propagate) > 0 {
		p50, p99 := percentiles(s.propagate)
		t.Logf("e2e: policy edit to the running sidecar, %d edits: p50 %s, p99 %s", len(s.propagate), p50, p99)
	}
}

// run runs one case as a subtest and counts it. Cases run in order and share the
// namespace; a failed case does not stop the later ones.
func (s *suite) run(t *testing.T, name string, f func(t *testing.T)) {
	s.cases++
	if !t.Run(name, f) {
		s.failed = append(s.failed, name)
	}
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		t.Fatal("KUBECONFIG is not set: run hack/test-e2e.sh (local|kind|existing) or point it at a cluster")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("reading KUBECONFIG %s: %v", kc, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(root, "bin", "k8s", kubeVersion, "kubectl")
		if _, err := os.Stat(kubectl); err != nil {
			kubectl = "kubectl"
		}
	}
	s := &suite{c: c, cs: cs, root: root, kubectl: kubectl}
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		t.Logf("cluster: %s, Kubernetes %s; kubectl: %s", cfg.Host, v.GitVersion, kubectl)
	} else {
		t.Fatalf("cluster at %s does not answer: %v", cfg.Host, err)
	}
	return s
}

// ---------------------------------------------------------------------------
// Setup

// installFile is the release artefact the suite installs: the self-signed one,
// since the local cluster and kind have no cert-manager.
const installFile = "dist/install-selfsigned.yaml"

// deployOperator applies dist/install-selfsigned.yaml and waits until the pod
// webhook injects.
// A manager that already runs an image other than bin/images/manager.tar is
// restarted, so the suite always tests the images just built.
func (s *suite) deployOperator(t *testing.T) {
	t.Helper()
	start := time.Now()
	from := installFile
	if readmeInstall() {
		from = "README.md's \"On your cluster\" (helm install of dist/chart)"
		s.installFromReadme(t)
	} else if helm := os.Getenv("E2E_HELM"); helm != "" {
		// The chart instead, self-signed like the file, CRD included.
		from = "dist/chart (helm template, certificates.mode=self-signed)"
		args := append([]string{"template", "retry-operator", filepath.Join(s.root, "dist", "chart"),
			"--namespace", operatorNamespace, "--include-crds", "--kube-version", kubeVersion,
			"--set", "certificates.mode=self-signed"}, helmImageValues()...)
		manifests, err := exec.Command(helm, args...).Output()
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		ns := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n---\n", operatorNamespace)
		s.kubectlOut(t, append([]byte(ns), manifests...), "apply", "--server-side", "--force-conflicts", "--field-manager=retry-e2e", "-f", "-")
	} else {
		manifests, err := os.ReadFile(filepath.Join(s.root, installFile))
		if err != nil {
			t.Fatal(err)
		}
		s.kubectlOut(t, withPushedImages(t, manifests), "apply", "--server-side", "--force-conflicts", "--field-manager=retry-e2e", "-f", "-")
	}
	if manager, sidecar, ok := pushedImages(); ok {
		from += fmt.Sprintf(" with the images pulled from the registry (%s, %s)", manager, sidecar)
	}

	// A pushed image is installed by digest: a new build is a new reference and
	// rolls the Deployment itself; a side-loaded one keeps its tag.
	want := ""
	if _, _, pushed := pushedImages(); !pushed {
		want = tarballConfigDigest(filepath.Join(s.root, "bin", "images", "manager.tar"))
	}
	if want != "" {
	stale:
		for _, p := range s.managerPods(t) {
			for _, st := range p.Status.ContainerStatuses {
				if st.Name == "manager" && st.ImageID != "" && !strings.HasSuffix(st.ImageID, want) {
					t.Logf("manager pod %s runs %s, bin/images/manager.tar is %s: restarting the manager", p.Name, st.ImageID, want)
					s.restartManager(t)
					break stale
				}
			}
		}
	}
	s.waitManagerReady(t, 3*time.Minute)
	t.Logf("operator installed from %s and serving its webhooks in %s", from, time.Since(start).Round(100*time.Millisecond))
}

// tarballConfigDigest is the image config digest in a docker-archive tarball,
// which containerd reports as the container's imageID; "" if unknown.
func tarballConfigDigest(path string) string {
	out, err := exec.Command("tar", "-xOf", path, "manifest.json").Output()
	if err != nil {
		return ""
	}
	var m []struct{ Config string }
	if json.Unmarshal(out, &m) != nil || len(m) != 1 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0].Config), "sha256:"), ".json")
}

func (s *suite) managerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := s.c.List(context.Background(), &pods, client.InNamespace(operatorNamespace),
		client.MatchingLabels{"control-plane": "controller-manager"}); err != nil {
		t.Fatalf("listing manager pods: %v", err)
	}
	return pods.Items
}

func (s *suite) restartManager(t *testing.T) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"retry.dev/e2e-restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: managerDeployment, Namespace: operatorNamespace}}
	if err := s.c.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("restarting the manager: %v", err)
	}
}

// waitManagerReady waits for the Deployment's rollout, then until a server-side
// dry-run pod in the (injection-enabled) test namespace comes back injected: the
// webhook is registered, its caBundle trusts the serving certificate, and the
// Service routes to the new pod.
func (s *suite) waitManagerReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	s.eventually(t, timeout, "the manager Deployment to roll out", func() (bool, string) {
		var d appsv1.Deployment
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: managerDeployment}, &d); err != nil {
			return false, err.Error()
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		pods := s.managerPods(t)
		msg := fmt.Sprintf("generation %d/%d, updated %d, ready %d, pods %d (want %d)", st.ObservedGeneration, d.Generation, st.UpdatedReplicas, st.ReadyReplicas, len(pods), want)
		return st.ObservedGeneration == d.Generation && st.UpdatedReplicas == want && st.ReadyReplicas == want && int32(len(pods)) == want, msg
	})
	s.eventually(t, time.Minute, "the pod webhook to inject a dry-run pod", func() (bool, string) {
		p := testPod(s.ns, "webhook-probe", nil)
		if err := s.c.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return sidecarCount(p) == 1, "dry-run pod not injected yet"
	})
}

func (s *suite) createNamespace(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	s.ns = "retry-e2e-" + randomSuffix()
	s.upstream = "flaky-upstream." + s.ns + ".svc"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: map[string]string{"retry.dev/injection": "enabled"}}}
	if err := s.c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace %s: %v", s.ns, err)
	}
	t.Logf("namespace %s (retry.dev/injection=enabled)", s.ns)
	// Registered first, so it runs last: after the diagnostics below.
	t.Cleanup(func() {
		if os.Getenv("E2E_KEEP_NAMESPACE") == "1" {
			t.Logf("E2E_KEEP_NAMESPACE=1: keeping namespace %s", s.ns)
			return
		}
		s.deleteNamespace(t, s.ns)
	})
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpDiagnostics(t)
		}
	})
}

func (s *suite) deleteNamespace(t *testing.T, name string) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := s.c.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", name, err)
		return
	}
	start := time.Now()
	for time.Since(start) < 2*time.Minute {
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, ns); apierrors.IsNotFound(err) {
			t.Logf("namespace %s deleted in %s", name, time.Since(start).Round(100*time.Millisecond))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("namespace %s still terminating after 2m; left to the namespace controller", name)
}

// deployWorkloads applies the flaky upstream, the demo app and the policy
// (test/e2e/testdata) and waits until the app answers through its sidecar.
func (s *suite) deployWorkloads(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	s.createTLSMaterial(t)
	s.applyTemplate(t, "upstream.yaml", nil)
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "flaky-upstream"}, &svc); err != nil {
		t.Fatalf("reading the flaky-upstream Service: %v", err)
	}
	s.applyTemplate(t, "app.yaml", map[string]string{"UPSTREAM_IP": svc.Spec.ClusterIP})
	s.applyTemplate(t, "policy.yaml", nil)
	s.applyTemplate(t, "policy-tls.yaml", nil)

	for _, name := range []string{"flaky-upstream", "demo-app"} {
		s.eventually(t, 2*time.Minute, "Deployment "+name+" to be available", func() (bool, string) {
			var d appsv1.Deployment
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &d); err != nil {
				return false, err.Error()
			}
			return d.Status.ReadyReplicas == 1 && d.Status.UpdatedReplicas == 1 && d.Status.Replicas == 1,
				fmt.Sprintf("ready %d, updated %d, total %d", d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas)
		})
	}
	s.appPod = s.podOf(t, "demo-app")
	s.eventually(t, time.Minute, "the demo app to answer through the API server's service proxy", func() (bool, string) {
		_, err := s.cs.CoreV1().Services(s.ns).ProxyGet("http", "demo-app", "8080", "healthz", nil).DoRaw(ctx)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("flaky-upstream (%s → %s), demo-app (%s) and the RetryPolicy ready in %s",
		s.upstream, svc.Spec.ClusterIP, s.appPod.Name, time.Since(start).Round(100*time.Millisecond))
}

// applyTemplate applies testdata/<file> with ${NAMESPACE} and vars filled in.
func (s *suite) applyTemplate(t *testing.T, file string, vars map[string]string) {
	t.Helper()
	s.applyTemplateIn(t, s.ns, file, vars)
}

// applyTemplateIn is applyTemplate with ${NAMESPACE} set to ns.
func (s *suite) applyTemplateIn(t *testing.T, ns, file string, vars map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "${NAMESPACE}", ns)
	for k, v := range vars {
		text = strings.ReplaceAll(text, "${"+k+"}", v)
	}
	if strings.Contains(text, "${") {
		t.Fatalf("testdata/%s: a ${VARIABLE} is left unfilled", file)
	}
	s.kubectlOut(t, []byte(text), "apply", "-f", "-")
}

// podOf returns the single running pod of a Deployment.
func (s *suite) podOf(t *testing.T, app string) corev1.Pod {
	t.Helper()
	return s.podOfIn(t, s.ns, app)
}

// podOfIn is podOf for a Deployment of namespace ns.
func (s *suite) podOfIn(t *testing.T, ns, app string) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := s.c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatalf("listing %s pods: %v", app, err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("want 1 %s pod, got %d", app, len(live))
	}
	return live[0]
}

// ---------------------------------------------------------------------------
// Cases

func (s *suite) sidecarInjected(t *testing.T) {
	p := s.appPod
	if n := sidecarCount(&p); n != 1 {
		t.Fatalf("want exactly one %s container, got %d (init: %v, app: %v)", sidecarName, n, names(p.Spec.InitContainers), names(p.Spec.Containers))
	}
	if got := p.Spec.InitContainers[0].Name; got != sidecarName {
		t.Errorf("the sidecar must be the first init container (it serves the later ones); first is %s", got)
	}
	var sc corev1.Container
	for _, c := range p.Spec.InitContainers {
		if c.Name == sidecarName {
			sc = c
		}
	}
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the sidecar must be native (init container with restartPolicy Always); got %v", sc.RestartPolicy)
	}
	checkRestricted(t, sc.SecurityContext, p.Spec.SecurityContext)
	if got := p.Labels["retry.dev/sidecar"]; got != "injected" {
		t.Errorf("label retry.dev/sidecar = %q, want injected", got)
	}
	app := p.Spec.Containers[0]
	for _, m := range app.VolumeMounts {
		if m.Name == "retry-sidecar-api" {
			t.Errorf("the app container mounts the sidecar's API credentials at %s; only the sidecar may", m.MountPath)
		}
	}
	env := map[string]string{}
	for _, e := range app.Env {
		env[e.Name] = e.Value
	}
	if env["HTTP_PROXY"] != "http://127.0.0.1:15001" || env["http_proxy"] != "http://127.0.0.1:15001" {
		t.Errorf("app container HTTP_PROXY/http_proxy = %q/%q, want http://127.0.0.1:15001", env["HTTP_PROXY"], env["http_proxy"])
	}
	var live corev1.Pod
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&p), &live); err != nil {
		t.Fatal(err)
	}
	for _, st := range live.Status.InitContainerStatuses {
		if st.Name == sidecarName && (st.State.Running == nil || !ptr.Deref(st.Started, false) || !st.Ready) {
			t.Errorf("sidecar not running and ready: %+v", st.State)
		}
	}
	t.Logf("pod %s: init containers %v, containers %v, sidecar image %s (%s)", p.Name, names(p.Spec.InitContainers), names(p.Spec.Containers), sc.Image, sc.ImagePullPolicy)
}

// checkRestricted asserts the "restricted" Pod Security Standard on a container.
func checkRestricted(t *testing.T, c *corev1.SecurityContext, pod *corev1.PodSecurityContext) {
	t.Helper()
	if c == nil {
		t.Fatal("the sidecar has no securityContext")
	}
	check := func(what string, ok bool, got any) {
		if !ok {
			t.Errorf("sidecar securityContext.%s: got %v", what, got)
		}
	}
	check("runAsNonRoot = true", ptr.Deref(c.RunAsNonRoot, false), c.RunAsNonRoot)
	check("runAsUser = 65532", ptr.Deref(c.RunAsUser, 0) == 65532, c.RunAsUser)
	check("readOnlyRootFilesystem = true", ptr.Deref(c.ReadOnlyRootFilesystem, false), c.ReadOnlyRootFilesystem)
	check("allowPrivilegeEscalation = false", c.AllowPrivilegeEscalation != nil && !*c.AllowPrivilegeEscalation, c.AllowPrivilegeEscalation)
	check("privileged unset or false", !ptr.Deref(c.Privileged, false), c.Privileged)
	check("capabilities.drop = [ALL], no add", c.Capabilities != nil && slices.Contains(c.Capabilities.Drop, "ALL") && len(c.Capabilities.Add) == 0, c.Capabilities)
	seccomp := c.SeccompProfile
	if seccomp == nil && pod != nil {
		seccomp = pod.SeccompProfile
	}
	check("seccompProfile = RuntimeDefault", seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault, seccomp)
}

func (s *suite) optedOutPod(t *testing.T) {
	// The flaky upstream's pod opts out in an injection-enabled namespace.
	p := s.podOf(t, "flaky-upstream")
	if p.Labels["retry.dev/inject"] != "false" {
		t.Fatalf("flaky-upstream pod lacks retry.dev/inject=false: %v", p.Labels)
	}
	if n := sidecarCount(&p); n != 0 || p.Labels["retry.dev/sidecar"] != "" {
		t.Errorf("opted-out pod %s was injected: init %v, labels %v", p.Name, names(p.Spec.InitContainers), p.Labels)
	}
	// And a bare pod, created directly.
	bare := testPod(s.ns, "opted-out", map[string]string{"retry.dev/inject": "false"})
	if err := s.c.Create(context.Background(), bare); err != nil {
		t.Fatalf("creating an opted-out pod: %v", err)
	}
	if n := sidecarCount(bare); n != 0 {
		t.Errorf("opted-out pod %s was injected: %v", bare.Name, names(bare.Spec.InitContainers))
	}
}

func (s *suite) kubeSystemPod(t *testing.T) {
	ctx := context.Background()
	p := testPod("kube-system", "retry-e2e-"+randomSuffix(), map[string]string{"retry.dev/inject": "true"})
	if err := s.c.Create(ctx, p); err != nil {
		t.Fatalf("creating a pod in kube-system: %v", err)
	}
	t.Cleanup(func() {
		_ = s.c.Delete(ctx, p, client.GracePeriodSeconds(0))
	})
	if n := sidecarCount(p); n != 0 {
		t.Errorf("pod %s/%s was injected: %v", p.Namespace, p.Name, names(p.Spec.InitContainers))
	}
}

func (s *suite) configMapHoldsPolicy(t *testing.T) {
	ctx := context.Background()
	s.eventually(t, time.Minute, "RetryPolicy Accepted=True and Programmed=True at its generation", func() (bool, string) {
		var rp v1alpha1.RetryPolicy
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: policyName}, &rp); err != nil {
			return false, err.Error()
		}
		acc := meta.FindStatusCondition(rp.Status.Conditions, "Accepted")
		prog := meta.FindStatusCondition(rp.Status.Conditions, "Programmed")
		ok := acc != nil && acc.Status == metav1.ConditionTrue && prog != nil && prog.Status == metav1.ConditionTrue &&
			rp.Status.ObservedGeneration == rp.Generation
		return ok, fmt.Sprintf("conditions %v, observedGeneration %d, generation %d", rp.Status.Conditions, rp.Status.ObservedGeneration, rp.Generation)
	})
	doc := s.renderedPolicies(t)
	up := findUpstream(t, doc, s.ns, policyName)
	if !slices.Equal(up.Hosts, []string{s.upstream}) {
		t.Errorf("rendered hosts = %v, want [%s]", up.Hosts, s.upstream)
	}
	if got := ptr.Deref(up.MaxAttempts, 0); got != 4 {
		t.Errorf("rendered maxAttempts = %d, want 4", got)
	}
	if up.RetryAfter == nil || up.RetryAfter.MaxWait == nil || *up.RetryAfter.MaxWait != 10*time.Second {
		t.Errorf("rendered retryAfter = %+v, want maxWait 10s", up.RetryAfter)
	}
	if up.Budget == nil || up.ReplayableMethods == nil {
		t.Errorf("rendered upstream lacks defaults (budget %v, replayableMethods %v): every default must be applied", up.Budget, up.ReplayableMethods)
	}
}

// renderedPolicies reads ConfigMap retry-policies of the test namespace.
func (s *suite) renderedPolicies(t *testing.T) policyset.Document {
	t.Helper()
	var cm corev1.ConfigMap
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "retry-policies"}, &cm); err != nil {
		t.Fatalf("ConfigMap retry-policies: %v", err)
	}
	if cm.Labels["app.kubernetes.io/managed-by"] != "retry-operator" {
		t.Errorf("ConfigMap labels %v lack app.kubernetes.io/managed-by=retry-operator", cm.Labels)
	}
	doc, err := policyset.Unmarshal([]byte(cm.Data["policies.json"]))
	if err != nil {
		t.Fatalf("ConfigMap retry-policies: %v\n%s", err, cm.Data["policies.json"])
	}
	return doc
}

func findUpstream(t *testing.T, doc policyset.Document, ns, name string) policyset.Upstream {
	t.Helper()
	for _, p := range doc.Policies {
		if p.Namespace == ns && p.Name == name && len(p.Upstreams) == 1 {
			return p.Upstreams[0]
		}
	}
	t.Fatalf("policy %s/%s with one upstream not in the ConfigMap: %+v", ns, name, doc)
	return policyset.Upstream{}
}

func (s *suite) retryAfterHonoured(t *testing.T) {
	r := s.call(t, "GET", "/retry-after/2", "")
	r.want(t, http.StatusOK, "success", 2)
	gap := r.Arrivals[1].At.Sub(r.Arrivals[0].At)
	t.Logf("429 Retry-After: 2 → retried %s later (at the upstream), outcome %s in %d ms", gap.Round(time.Millisecond), r.outcome(), r.ElapsedMillis)
	if gap < 2*time.Second {
		t.Errorf("the retry arrived %s after the 429, before the 2 s the server asked for", gap)
	}
	// Retry-After 2 + spread 500ms; anything far beyond means the hint was misread.
	if gap > 5*time.Second {
		t.Errorf("the retry arrived %s after the 429; want about 2-2.5 s (Retry-After 2, spread 500ms)", gap)
	}
}

func (s *suite) flakyRetried(t *testing.T) {
	r := s.call(t, "GET", "/flaky", "")
	r.want(t, http.StatusOK, "success", 2)
	gap := r.Arrivals[1].At.Sub(r.Arrivals[0].At)
	t.Logf("503 then 200: retried %s later (backoff base 200ms, Full jitter)", gap.Round(time.Millisecond))
	if gap > 2*time.Second {
		t.Errorf("retry after %s; the first backoff is at most 200ms", gap)
	}
}

func (s *suite) longRetryAfterDeferred(t *testing.T) {
	r := s.call(t, "GET", "/retry-after/120", "")
	r.want(t, http.StatusTooManyRequests, "deferred", 1)
	if r.ElapsedMillis > 2000 {
		t.Errorf("a deferred answer took %d ms; it must come back at once", r.ElapsedMillis)
	}
	if got := r.Headers["Retry-After"]; got != "120" {
		t.Errorf("Retry-After = %q, want the upstream's 120 untouched", got)
	}
	nb, err := http.ParseTime(r.Headers["X-Retry-Not-Before"])
	if err != nil {
		t.Fatalf("X-Retry-Not-Before = %q: %v", r.Headers["X-Retry-Not-Before"], err)
	}
	ahead := nb.Sub(r.Arrivals[0].At)
	t.Logf("429 Retry-After: 120 → %s in %d ms, X-Retry-Not-Before %s (%s after the arrival)", r.outcome(), r.ElapsedMillis, r.Headers["X-Retry-Not-Before"], ahead.Round(time.Second))
	if ahead < 118*time.Second || ahead > 123*time.Second {
		t.Errorf("X-Retry-Not-Before is %s after the 429; want about 120 s", ahead)
	}
}

func (s *suite) postNotReplayed(t *testing.T) {
	r := s.call(t, "POST", "/write", "")
	r.want(t, http.StatusServiceUnavailable, "not-replayable", 1)
}

func (s *suite) postWithKeyReplayed(t *testing.T) {
	key := "order-" + randomSuffix()
	r := s.call(t, "POST", "/write", key)
	r.want(t, http.StatusServiceUnavailable, "exhausted", 4)
	for i, a := range r.Arrivals {
		if a.IdempotencyKey != key || a.BodyBytes != r.Arrivals[0].BodyBytes || a.Attempt != strconv.Itoa(i+1) {
			t.Errorf("arrival %d: key %q, body %d bytes, X-Retry-Attempt %q; want key %q, the same body, attempt %d",
				i+1, a.IdempotencyKey, a.BodyBytes, a.Attempt, key, i+1)
		}
	}
}

func (s *suite) outageBounded(t *testing.T) {
	r := s.call(t, "GET", "/always-503", "")
	r.want(t, http.StatusServiceUnavailable, "exhausted", 4)
}

// policyEditPropagates edits maxAttempts five times (4 → 2 → 3 → 2 → 3 → 2)
// and measures, for each, the time from the accepted edit to the sidecar
// running the new revision (its /config on the stats port, read through the API
// server's pod proxy every 20 ms), then checks the behaviour with one call.
// The sidecar watches retry-policies through the API server; the kubelet's
// copy of the mounted ConfigMap would take about a minute.
func (s *suite) policyEditPropagates(t *testing.T) {
	before := s.podState(t)
	for i, attempts := range []int{2, 3, 2, 3, 2} {
		took := s.editAndWait(t, s.appPod.Name, attempts)
		s.propagate = append(s.propagate, took)
		r := s.call(t, "GET", "/always-503", "")
		r.want(t, http.StatusServiceUnavailable, "exhausted", attempts)
		t.Logf("edit %d: maxAttempts → %d reached the sidecar after %s", i+1, attempts, took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("edit %d took %s to reach the sidecar; want at most 5 s", i+1, took.Round(time.Millisecond))
		}
	}
	p50, p99 := percentiles(s.propagate)
	t.Logf("policy edit to the running sidecar over %d edits: p50 %s, p99 %s", len(s.propagate), p50, p99)
	if reload := s.sidecarReloadAfter(t, time.Now().Add(-time.Minute)); reload.IsZero() {
		t.Errorf("no \"configuration loaded\" line in the sidecar's log for the edits")
	}
	if after := s.podState(t); after != before {
		t.Errorf("the pod restarted or was replaced: before %s, after %s", before, after)
	}
}

// editAndWait sets maxAttempts of the policy and returns the time until the
// sidecar of pod reports a revision above the one it ran before the edit.
func (s *suite) editAndWait(t *testing.T, pod string, attempts int) time.Duration {
	t.Helper()
	was := s.sidecarConfig(t, pod)
	edited := time.Now()
	s.patchPolicy(t, fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":%d}]`, attempts))
	var now policyset.ConfigStatus
	for time.Since(edited) < 150*time.Second {
		now = s.sidecarConfig(t, pod)
		if now.Revision > was.Revision {
			return time.Since(edited)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the sidecar of %s still runs revision %d (%s) %s after the edit", pod, now.Revision, now.Source, time.Since(edited).Round(time.Second))
	return 0
}

// sidecarConfig reads GET /config from the sidecar's stats port through the API
// server's pod proxy.
func (s *suite) sidecarConfig(t *testing.T, pod string) policyset.ConfigStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := s.cs.CoreV1().Pods(s.ns).ProxyGet("http", pod, strconv.Itoa(statsPort), "config", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /config of %s: %v (%s)", pod, err, body)
	}
	var c policyset.ConfigStatus
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("GET /config of %s: %q: %v", pod, body, err)
	}
	return c
}

// sidecarMetric reads one series from the sidecar's stats port; -1 if absent.
func (s *suite) sidecarMetric(t *testing.T, pod, series string) float64 {
	t.Helper()
	return s.sidecarMetricIn(t, s.ns, pod, series)
}

// sidecarMetricIn is sidecarMetric for a pod of namespace ns.
func (s *suite) sidecarMetricIn(t *testing.T, ns, pod, series string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := s.cs.CoreV1().Pods(ns).ProxyGet("http", pod, strconv.Itoa(statsPort), "metrics", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /metrics of %s: %v", pod, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// percentiles are the nearest-rank p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return sorted[max(0, min(i, len(sorted)-1))].Round(time.Millisecond)
	}
	return rank(0.50), rank(0.99)
}

// statusCountsProgrammedPods waits until the policy says its one selected pod
// runs the current generation (the manager asks the sidecar's /config).
func (s *suite) statusCountsProgrammedPods(t *testing.T) {
	start := time.Now()
	var msg string
	s.eventually(t, time.Minute, "status.programmedPods 1 of 1", func() (bool, string) {
		var rp v1alpha1.RetryPolicy
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: policyName}, &rp); err != nil {
			return false, err.Error()
		}
		prog := meta.FindStatusCondition(rp.Status.Conditions, "Programmed")
		if prog == nil {
			return false, "no Programmed condition"
		}
		msg = prog.Message
		want := fmt.Sprintf("1/1 pods run generation %d ", rp.Generation)
		return rp.Status.ProgrammedPods == 1 && rp.Status.SelectedPods == 1 && strings.HasPrefix(prog.Message, want),
			fmt.Sprintf("programmedPods %d/%d, Programmed %q, want %q…", rp.Status.ProgrammedPods, rp.Status.SelectedPods, prog.Message, want)
	})
	t.Logf("Programmed: %q (after %s)", msg, time.Since(start).Round(100*time.Millisecond))
}

// fileFallback removes the sidecars' API access in the namespace (the
// retry.dev/sidecar-api-access=disabled annotation: the manager deletes the
// RoleBinding), replaces the app pod so its sidecar starts without access, and
// checks that it follows the mounted file: ready, /config source "file", the
// fallback metric, and an edit arriving with the kubelet's sync.
func (s *suite) fileFallback(t *testing.T) {
	ctx := context.Background()
	setAccess := func(value string) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"retry.dev/sidecar-api-access":%s}}}`, value)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}
		if err := s.c.Patch(ctx, ns, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("annotating namespace %s: %v", s.ns, err)
		}
	}
	setAccess(`"disabled"`)
	t.Cleanup(func() { setAccess("null") })
	s.eventually(t, 30*time.Second, "the RoleBinding retry-sidecar to be deleted", func() (bool, string) {
		err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "retry-sidecar"}, &rbacv1.RoleBinding{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	old := s.appPod
	if err := s.c.Delete(ctx, &old); err != nil {
		t.Fatalf("deleting the app pod: %v", err)
	}
	s.eventually(t, 2*time.Minute, "a new demo-app pod to be ready", func() (bool, string) {
		var d appsv1.Deployment
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "demo-app"}, &d); err != nil {
			return false, err.Error()
		}
		var pods corev1.PodList
		if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{"app": "demo-app"}); err != nil {
			return false, err.Error()
		}
		// The Deployment's ready count may still be the old pod's: the new
		// pod itself must be Ready, with its IP (the pod proxy dials it).
		var live []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.UID != old.UID && p.Status.PodIP != "" && podReady(&p) {
				live = append(live, p.Name)
			}
		}
		return len(live) == 1 && len(pods.Items) == 1 && d.Status.ReadyReplicas == 1,
			fmt.Sprintf("new pods %v of %d, ready %d", live, len(pods.Items), d.Status.ReadyReplicas)
	})
	s.appPod = s.podOf(t, "demo-app")
	if c := s.sidecarConfig(t, s.appPod.Name); c.Source != "file" {
		t.Errorf("/config source %q without API access, want file", c.Source)
	}
	s.eventually(t, 30*time.Second, "the fallback metric", func() (bool, string) {
		v := s.sidecarMetric(t, s.appPod.Name, `retry_sidecar_config_api_fallbacks_total{reason="forbidden"}`)
		return v == 1, fmt.Sprintf("retry_sidecar_config_api_fallbacks_total{reason=\"forbidden\"} = %v", v)
	})

	took := s.editAndWait(t, s.appPod.Name, 3)
	c := s.sidecarConfig(t, s.appPod.Name)
	t.Logf("without API access the edit arrived through the mounted file after %s (revision %d, source %s)", took.Round(100*time.Millisecond), c.Revision, c.Source)
	if c.Source != "file" {
		t.Errorf("/config source %q, want file", c.Source)
	}
	r := s.call(t, "GET", "/always-503", "")
	r.want(t, http.StatusServiceUnavailable, "exhausted", 3)
}

// fleetPropagation runs n more injected pods and measures, over 5 edits, the
// time until every one of their sidecars runs the new revision.
func (s *suite) fleetPropagation(t *testing.T, n int) {
	ctx := context.Background()
	s.applyTemplate(t, "fleet.yaml", map[string]string{"REPLICAS": strconv.Itoa(n)})
	s.eventually(t, 5*time.Minute, fmt.Sprintf("%d fleet pods to be ready", n), func() (bool, string) {
		var d appsv1.Deployment
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "fleet"}, &d); err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == int32(n), fmt.Sprintf("ready %d of %d", d.Status.ReadyReplicas, n)
	})
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{"app": "fleet"}); err != nil {
		t.Fatal(err)
	}
	var all, slowest []time.Duration
	for i, attempts := range []int{2, 3, 2, 3, 2} {
		was := s.sidecarConfig(t, pods.Items[0].Name).Revision
		edited := time.Now()
		s.patchPolicy(t, fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":%d}]`, attempts))
		pending := map[string]bool{}
		for _, p := range pods.Items {
			pending[p.Name] = true
		}
		var last time.Duration
		for len(pending) > 0 && time.Since(edited) < 150*time.Second {
			for name := range pending {
				if s.sidecarConfig(t, name).Revision > was {
					d := time.Since(edited)
					all = append(all, d)
					last = d
					delete(pending, name)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(pending) > 0 {
			t.Fatalf("edit %d: %d of %d sidecars still run revision %d after 150 s", i+1, len(pending), n, was)
		}
		slowest = append(slowest, last)
		t.Logf("edit %d: all %d sidecars run the new revision after %s", i+1, n, last.Round(time.Millisecond))
	}
	p50, p99 := percentiles(all)
	sp50, sp99 := percentiles(slowest)
	t.Logf("fleet of %d pods, 5 edits: per pod p50 %s p99 %s; slowest pod per edit p50 %s p99 %s (measured by polling /config through the API server, one pod at a time)",
		n, p50, p99, sp50, sp99)
	if err := s.c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "fleet"}}); err != nil {
		t.Logf("deleting the fleet: %v", err)
	}
}

// podState identifies the app pod's incarnation: UID, restart counts, start times.
func (s *suite) podState(t *testing.T) string {
	t.Helper()
	var p corev1.Pod
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&s.appPod), &p); err != nil {
		t.Fatalf("the app pod: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "uid %s", p.UID)
	for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		started := ""
		if st.State.Running != nil {
			started = st.State.Running.StartedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "; %s restarts %d started %s", st.Name, st.RestartCount, started)
	}
	return b.String()
}

// sidecarReloadAfter is the time of the first "configuration loaded" line the
// sidecar logged after t0 (zero if none).
func (s *suite) sidecarReloadAfter(t *testing.T, t0 time.Time) time.Time {
	t.Helper()
	out, err := s.cs.CoreV1().Pods(s.ns).GetLogs(s.appPod.Name, &corev1.PodLogOptions{Container: sidecarName}).DoRaw(context.Background())
	if err != nil {
		t.Logf("sidecar logs: %v", err)
		return time.Time{}
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "configuration loaded" && l.Time.After(t0) {
			return l.Time
		}
	}
	return time.Time{}
}

func (s *suite) patchPolicy(t *testing.T, jsonPatch string) {
	t.Helper()
	rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: policyName}}
	if err := s.c.Patch(context.Background(), rp, client.RawPatch(types.JSONPatchType, []byte(jsonPatch))); err != nil {
		t.Fatalf("patching the RetryPolicy (%s): %v", jsonPatch, err)
	}
}

func (s *suite) invalidEditRejected(t *testing.T) {
	ctx := context.Background()
	var before v1alpha1.RetryPolicy
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: policyName}, &before); err != nil {
		t.Fatal(err)
	}
	cmBefore := s.renderedPolicies(t)
	edits := map[string]struct{ patch, want string }{
		// The CRD's OpenAPI schema: maximum 10.
		"maxAttempts 12 (CRD schema)": {
			`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":12}]`, "spec.upstreams[0].maxAttempts",
		},
		// CEL: base <= max.
		"backoff.base above backoff.max (CEL)": {
			`[{"op":"replace","path":"/spec/upstreams/0/backoff","value":{"base":"5s","max":"1s"}}]`, "spec.upstreams[0].backoff",
		},
		// Only the validating webhook (Go validation) knows hosts are lower-case.
		"an upper-case host (validating webhook)": {
			`[{"op":"replace","path":"/spec/upstreams/0/hosts/0","value":"Flaky-Upstream.example"}]`, "spec.upstreams[0].hosts[0]",
		},
	}
	for name, e := range edits {
		rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: policyName}}
		err := s.c.Patch(ctx, rp, client.RawPatch(types.JSONPatchType, []byte(e.patch)))
		switch {
		case err == nil:
			t.Errorf("%s: accepted; want rejected", name)
		case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err):
			t.Errorf("%s: rejected with %v; want an Invalid error", name, err)
		case !strings.Contains(err.Error(), e.want):
			t.Errorf("%s: error %q does not name the field %s", name, err, e.want)
		default:
			t.Logf("%s: rejected: %v", name, err)
		}
	}
	var after v1alpha1.RetryPolicy
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: policyName}, &after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation {
		t.Errorf("generation moved %d → %d: an invalid edit was stored", before.Generation, after.Generation)
	}
	if cmAfter := s.renderedPolicies(t); !jsonEqual(cmBefore, cmAfter) {
		t.Errorf("ConfigMap changed after rejected edits")
	}
	r := s.call(t, "GET", "/always-503", "")
	r.want(t, http.StatusServiceUnavailable, "exhausted", 2)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// operatorDown scales the manager to zero, creates a pod and a policy, and
// brings the manager back (also when the case fails).
func (s *suite) operatorDown(t *testing.T) {
	ctx := context.Background()
	scale := func(n int) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: managerDeployment, Namespace: operatorNamespace}}
		if err := s.c.Patch(ctx, d, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))); err != nil {
			t.Fatalf("scaling the manager to %d: %v", n, err)
		}
	}
	scale(0)
	t.Cleanup(func() {
		scale(2)
		s.waitManagerReady(t, 3*time.Minute)
		t.Log("manager back: 2 replicas, webhook injecting")
	})
	s.eventually(t, time.Minute, "the manager pods to be gone", func() (bool, string) {
		n := len(s.managerPods(t))
		return n == 0, fmt.Sprintf("%d pods left", n)
	})

	start := time.Now()
	p := testPod(s.ns, "while-operator-down", nil)
	if err := s.c.Create(ctx, p); err != nil {
		t.Fatalf("creating a pod with the operator down: %v (failurePolicy must be Ignore)", err)
	}
	took := time.Since(start)
	t.Logf("pod created in %s with the operator down (init containers %v)", took.Round(time.Millisecond), names(p.Spec.InitContainers))
	if sidecarCount(p) != 0 {
		t.Errorf("a pod created with the operator down has a sidecar: who injected it?")
	}
	if took > 10*time.Second {
		t.Errorf("creating the pod took %s: a down webhook must not hold pod creation", took)
	}

	rp := &v1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "while-operator-down"},
		Spec:       v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "other", Hosts: []string{"other." + s.ns + ".svc"}}}},
	}
	if err := s.c.Create(ctx, rp); err == nil {
		t.Errorf("a RetryPolicy was stored while its validating webhook (failurePolicy Fail) was down")
	} else {
		t.Logf("RetryPolicy refused while the operator is down: %v", err)
	}
}

// statsPortOnPodIP reads the app pod's sidecar stats port through the API
// server's pod proxy, which dials the pod IP: what Prometheus scrapes.
func (s *suite) statsPortOnPodIP(t *testing.T) {
	ctx := context.Background()
	pod := s.podOf(t, "demo-app")
	var port int32
	for _, c := range pod.Spec.InitContainers {
		for _, p := range c.Ports {
			if c.Name == sidecarName && p.Name == "retry-stats" {
				port = p.ContainerPort
			}
		}
	}
	if port != 15090 {
		t.Fatalf("sidecar port retry-stats = %d, want 15090", port)
	}
	get := func(path string) []byte {
		b, err := s.cs.CoreV1().Pods(s.ns).ProxyGet("http", pod.Name, "15090", path, nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET %s on %s:15090: %v", path, pod.Status.PodIP, err)
		}
		return b
	}
	var info policyset.ConfigStatus
	if err := json.Unmarshal(get("/config"), &info); err != nil {
		t.Fatalf("/config: %v", err)
	}
	if info.Revision == 0 || !strings.HasPrefix(info.Hash, "sha256:") || !slices.Contains(info.Upstreams, "flaky-upstream") {
		t.Errorf("/config = %+v, want a revision, a sha256 hash and upstream flaky-upstream", info)
	}
	if m := string(get("/metrics")); !strings.Contains(m, "retry_sidecar_request_duration_seconds_bucket") {
		t.Errorf("/metrics has no retry_sidecar_request_duration_seconds histogram")
	}
	t.Logf("pod %s (%s): /config hash %s upstreams %v", pod.Name, pod.Status.PodIP, info.Hash, info.Upstreams)
}

// leaderKilled force-deletes the replica that holds the lease (no graceful
// release) in the middle of a burst of policy changes — policies created
// before the kill, while the leader reconciles them, and more created and
// every one edited after it, while no one holds the lease — then checks that
// the other replica takes over and nothing is lost: every change ends up
// Ready with observedGeneration at its generation and rendered into the
// ConfigMap as last written, and a new pod is injected.
func (s *suite) leaderKilled(t *testing.T) {
	ctx := context.Background()
	leader := s.waitForALeaderOfTwoReadyReplicas(t)

	const burst = 8 // policies; half created before the kill
	policies, final := burstPolicies(s.ns, burst)
	t.Cleanup(func() {
		for _, rp := range policies {
			_ = s.c.Delete(ctx, rp)
		}
	})
	create := func(rp *v1alpha1.RetryPolicy) {
		s.admitDespiteTheKill(t, "policy "+rp.Name, func() error { return s.c.Create(ctx, rp.DeepCopy()) })
	}
	for _, rp := range policies[:burst/2] {
		create(rp)
	}
	start := time.Now()
	if err := s.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: leader}},
		client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("killing the leader %s: %v", leader, err)
	}
	t.Logf("killed the leader %s after creating %d policies", leader, burst/2)
	for _, rp := range policies[burst/2:] {
		create(rp)
	}
	for i, rp := range policies {
		patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/maxAttempts","value":%d}]`, final[i])
		s.admitDespiteTheKill(t, "an edit of "+rp.Name, func() error {
			return s.c.Patch(ctx, &v1alpha1.RetryPolicy{ObjectMeta: rp.ObjectMeta}, client.RawPatch(types.JSONPatchType, []byte(patch)))
		})
	}
	written := time.Since(start)

	s.waitInjectionBySurvivingReplica(t)
	injected := time.Since(start)
	p := testPod(s.ns, "after-leader-killed", nil)
	if err := s.c.Create(ctx, p); err != nil {
		t.Fatalf("creating a pod after the leader was killed: %v", err)
	}
	if sidecarCount(p) != 1 {
		t.Errorf("pod created after the leader was killed has %d sidecars, want 1", sidecarCount(p))
	}

	s.waitBurstReconciled(t, policies)
	reconciled := time.Since(start)
	doc := s.renderedPolicies(t)
	for i, rp := range policies {
		if got := ptr.Deref(findUpstream(t, doc, s.ns, rp.Name).MaxAttempts, 0); got != final[i] {
			t.Errorf("policy %s rendered with maxAttempts %d, want %d (its last edit)", rp.Name, got, final[i])
		}
	}
	newLeader := s.leaseHolder()
	t.Logf("burst of %d creates and %d edits written %s after the kill; injection back after %s; every change Ready and rendered after %s, by the new leader %s",
		burst, burst, written.Round(100*time.Millisecond), injected.Round(100*time.Millisecond), reconciled.Round(100*time.Millisecond), newLeader)
	if newLeader == leader || newLeader == "" {
		t.Errorf("lease holder after the kill = %q, want the other replica (killed %s)", newLeader, leader)
	}
	s.waitManagerReady(t, 3*time.Minute) // the Deployment replaces the killed replica
}

// leaseHolder is the pod that holds the manager's leader Lease, or "".
func (s *suite) leaseHolder() string {
	l, err := s.cs.CoordinationV1().Leases(operatorNamespace).Get(context.Background(), manager.LeaderElectionID, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return pod
}

// waitForALeaderOfTwoReadyReplicas waits up to a minute until both manager
// replicas are ready and one holds the Lease, and returns that one.
func (s *suite) waitForALeaderOfTwoReadyReplicas(t *testing.T) (leader string) {
	s.eventually(t, time.Minute, "a leader among 2 ready replicas", func() (bool, string) {
		leader = s.leaseHolder()
		ready := 0
		for _, p := range s.managerPods(t) {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return leader != "" && ready == 2, fmt.Sprintf("leader %q, %d ready replicas", leader, ready)
	})
	return leader
}

// burstPolicies are n policies of ns selecting no pod, with maxAttempts 2,
// and the maxAttempts each must end up rendered with after its edit.
func burstPolicies(ns string, n int) (policies []*v1alpha1.RetryPolicy, final []int32) {
	policies = make([]*v1alpha1.RetryPolicy, n)
	final = make([]int32, n)
	for i := range policies {
		policies[i] = &v1alpha1.RetryPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("burst-%d", i)},
			Spec: v1alpha1.RetryPolicySpec{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-burst": "none"}},
				Upstreams: []v1alpha1.Upstream{{Name: "burst", Hosts: []string{fmt.Sprintf("burst-%d.%s.svc", i, ns)},
					MaxAttempts: ptr.To[int32](2)}},
			},
		}
		final[i] = 3 + int32(i%4)
	}
	return policies, final
}

// admitDespiteTheKill retries a write the validating webhook (failurePolicy
// Fail) refused while the killed replica was still behind its Service.
func (s *suite) admitDespiteTheKill(t *testing.T, what string, write func() error) {
	s.eventually(t, time.Minute, "the policy webhook to admit "+what, func() (bool, string) {
		if err := write(); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error()
		}
		return true, ""
	})
}

// waitInjectionBySurvivingReplica: admission does not wait for the lease:
// the surviving replica serves it once the killed one has left the Service
// (three dry runs in a row).
func (s *suite) waitInjectionBySurvivingReplica(t *testing.T) {
	inARow := 0
	s.eventually(t, time.Minute, "dry-run pods to be injected by the surviving replica", func() (bool, string) {
		p := testPod(s.ns, "after-leader-killed", nil)
		if err := s.c.Create(context.Background(), p, client.DryRunAll); err != nil || sidecarCount(p) != 1 {
			inARow = 0
			return false, fmt.Sprintf("dry-run pod not injected (err %v)", err)
		}
		inARow++
		return inARow >= 3, fmt.Sprintf("%d injected in a row", inARow)
	})
}

// waitBurstReconciled waits up to two minutes until every policy's last
// change is reconciled (by a new leader).
func (s *suite) waitBurstReconciled(t *testing.T, policies []*v1alpha1.RetryPolicy) {
	s.eventually(t, 2*time.Minute, "every change of the burst to be reconciled by a new leader", func() (bool, string) {
		for _, rp := range policies {
			var got v1alpha1.RetryPolicy
			if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(rp), &got); err != nil {
				return false, err.Error()
			}
			if msg := reconciledAt(&got); msg != "" {
				return false, fmt.Sprintf("%s: %s (lease held by %q)", got.Name, msg, s.leaseHolder())
			}
		}
		return true, ""
	})
}

// reconciledAt says why rp's newest generation is not yet Accepted,
// Programmed and Ready; "" when it is.
func reconciledAt(rp *v1alpha1.RetryPolicy) string {
	if rp.Status.ObservedGeneration != rp.Generation {
		return fmt.Sprintf("observedGeneration %d, generation %d", rp.Status.ObservedGeneration, rp.Generation)
	}
	for _, typ := range []string{"Accepted", "Programmed", "Ready"} {
		c := meta.FindStatusCondition(rp.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rp.Generation {
			return fmt.Sprintf("%s = %+v at generation %d", typ, c, rp.Generation)
		}
	}
	return ""
}

// ---------------------------------------------------------------------------
// Calls through the demo app

// report is the demo app's answer to /call, with the suite's assertions on it.
type report wire.Report

func (r report) outcome() string { return r.Headers["X-Retry-Outcome"] }

// want checks the status, the X-Retry-Outcome and X-Retry-Attempts headers, and
// that the upstream saw exactly `attempts` arrivals.
func (r report) want(t *testing.T, status int, outcome string, attempts int) {
	t.Helper()
	if r.Error != "" {
		t.Fatalf("%s %s: the app's call failed: %s", r.Method, r.URL, r.Error)
	}
	if r.Status != status || r.outcome() != outcome || r.Headers["X-Retry-Attempts"] != strconv.Itoa(attempts) || len(r.Arrivals) != attempts {
		t.Fatalf("%s %s (request %s):\n got: status %d, X-Retry-Outcome %q, X-Retry-Attempts %q, %d arrivals at the upstream\nwant: status %d, X-Retry-Outcome %q, X-Retry-Attempts %q, %d arrivals\n%s",
			r.Method, r.URL, r.RequestID, r.Status, r.outcome(), r.Headers["X-Retry-Attempts"], len(r.Arrivals),
			status, outcome, strconv.Itoa(attempts), attempts, r.timeline())
	}
}

func (r report) timeline() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  headers %v, %d ms\n", r.Headers, r.ElapsedMillis)
	for i, a := range r.Arrivals {
		fmt.Fprintf(&b, "  arrival %d at +%s: %s %s X-Retry-Attempt=%q key=%q → %d\n", i+1,
			a.At.Sub(r.Arrivals[0].At).Round(time.Millisecond), a.Method, a.Path, a.Attempt, a.IdempotencyKey, a.Status)
	}
	return b.String()
}

// call makes the demo app call the flaky upstream's path through its sidecar.
func (s *suite) call(t *testing.T, method, path, key string) report {
	t.Helper()
	return s.callHost(t, s.upstream, method, path, key)
}

// callHost is call with another authority of the flaky upstream.
func (s *suite) callHost(t *testing.T, host, method, path, key string) report {
	t.Helper()
	params := map[string]string{"url": "http://" + host + path, "method": method}
	if key != "" {
		params["key"] = key
	}
	r, err := s.tryCall(params)
	if err != nil {
		t.Fatalf("calling %s %s through the demo app: %v", method, path, err)
	}
	return r
}

// tryCall is the demo app's /call with params (url, method, key, id), through
// the API server's service proxy; safe to use from any goroutine.
func (s *suite) tryCall(params map[string]string) (report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var r report
	body, err := s.cs.CoreV1().Services(s.ns).ProxyGet("http", "demo-app", "8080", "call", params).DoRaw(ctx)
	if err != nil {
		return r, fmt.Errorf("%w (%s)", err, body)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("demo app answer %q: %w", body, err)
	}
	return r, nil
}

// ---------------------------------------------------------------------------
// Helpers

// testPod is a minimal pod with the demo-app image (present on every cluster the
// suite runs on), labelled e2e=true plus labels.
func testPod(ns, name string, labels map[string]string) *corev1.Pod {
	l := map[string]string{"e2e": "true"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: "retry.dev/demo-app:dev", ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sidecarCount(p *corev1.Pod) int {
	n := 0
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Name == sidecarName {
			n++
		}
	}
	return n
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// eventually polls cond every 500ms until it holds; after timeout it fails the
// test with cond's last message.
func (s *suite) eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	polltest.UntilEvery(t, timeout, 500*time.Millisecond, explained(what, cond))
}

// explained is cond as polltest asks it: nil once it holds, else what is
// awaited and cond's message.
func explained(what string, cond func() (bool, string)) func() error {
	return func() error {
		if ok, msg := cond(); !ok {
			return fmt.Errorf("waiting for %s: %s", what, msg)
		}
		return nil
	}
}

func (s *suite) kubectlOut(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := s.kubectlRun(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *suite) kubectlRun(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(s.kubectl, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), err
	}
	return stdout.Bytes(), nil
}

// dumpDiagnostics logs what a failed run needs: manager logs, sidecar and app
// logs, events and pod descriptions of both namespaces.
func (s *suite) dumpDiagnostics(t *testing.T) {
	t.Log("========== diagnostics (the run failed) ==========")
	s.summarizeManager(t)
	section := func(title string, args ...string) {
		out, err := s.kubectlRun(nil, args...)
		if err != nil {
			t.Logf("----- %s: %v\n%s", title, err, out)
			return
		}
		t.Logf("----- %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
	}
	section("manager logs", "-n", operatorNamespace, "logs", "-l", "control-plane=controller-manager", "--tail=200", "--all-containers", "--prefix")
	section("operator pods", "-n", operatorNamespace, "describe", "pods")
	section("operator events", "-n", operatorNamespace, "get", "events", "--sort-by=.lastTimestamp")
	if s.ns == "" {
		return
	}
	section("sidecar logs", "-n", s.ns, "logs", "-l", "app=demo-app", "-c", sidecarName, "--tail=300", "--prefix")
	section("demo-app logs", "-n", s.ns, "logs", "-l", "app=demo-app", "-c", "demo-app", "--tail=100", "--prefix")
	section("flaky-upstream logs", "-n", s.ns, "logs", "-l", "app=flaky-upstream", "--tail=100", "--prefix")
	section("pods", "-n", s.ns, "describe", "pods")
	section("events", "-n", s.ns, "get", "events", "--sort-by=.lastTimestamp")
	section("RetryPolicies", "-n", s.ns, "get", "retrypolicies", "-o", "yaml")
	section("ConfigMap retry-policies", "-n", s.ns, "get", "configmap", "retry-policies", "-o", "yaml")
}

// summarizeManager logs, each line marked "e2e-summary:", the manager's state
// in a few lines: its replicas with their restarts and last exit, the lease
// holder, and each replica's last error lines (of the previous container too).
// hack/test-e2e.sh repeats the marked lines at the end of a failed run, where a
// CI log that keeps only its tail still shows them.
func (s *suite) summarizeManager(t *testing.T) {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, "e2e-summary: "+fmt.Sprintf(format, args...)) }
	ctx := context.Background()
	if l, err := s.cs.CoordinationV1().Leases(operatorNamespace).Get(ctx, manager.LeaderElectionID, metav1.GetOptions{}); err != nil {
		add("lease: %v", err)
	} else {
		add("lease held by %s, renewed %s", ptr.Deref(l.Spec.HolderIdentity, ""), l.Spec.RenewTime)
	}
	for _, p := range s.managerPods(t) {
		for _, c := range p.Status.ContainerStatuses {
			last := "none"
			if term := c.LastTerminationState.Terminated; term != nil {
				last = fmt.Sprintf("exit %d (%s) at %s", term.ExitCode, term.Reason, term.FinishedAt.Format(time.RFC3339))
			}
			add("manager pod %s: ready %t, restarts %d, last exit %s", p.Name, c.Ready, c.RestartCount, last)
		}
		for _, previous := range []bool{true, false} {
			out, err := s.cs.CoreV1().Pods(operatorNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous, TailLines: ptr.To[int64](400)}).DoRaw(ctx)
			if err != nil {
				continue
			}
			var errs []string
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, `"level":"error"`) {
					errs = append(errs, line[:min(len(line), 300)])
				}
			}
			for _, line := range errs[max(0, len(errs)-4):] {
				add("%s (previous container %t): %s", p.Name, previous, line)
			}
		}
	}
	t.Log(strings.Join(lines, "\n"))
}

// ---------------------------------------------------------------------------
// TLS origination (docs/tls.md)

// tlsHost is the name the app calls for the flaky upstream's TLS listener.
func (s *suite) tlsHost() string { return "flaky-upstream-tls." + s.ns + ".svc" }

// createTLSMaterial makes a CA for the test, the upstream's certificate for
// tlsHost (Secret flaky-upstream-tls, mounted by the upstream) and the CA's
// ConfigMap flaky-upstream-ca (key ca.crt) that the TLS policy names.
func (s *suite) createTLSMaterial(t *testing.T) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e partner CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: s.tlsHost()}, DNSNames: []string{s.tlsHost()},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "flaky-upstream-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		}}
	if err := s.c.Create(ctx, secret); err != nil {
		t.Fatalf("creating Secret flaky-upstream-tls: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "flaky-upstream-ca"},
		Data: map[string]string{"ca.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))}}
	if err := s.c.Create(ctx, cm); err != nil {
		t.Fatalf("creating ConfigMap flaky-upstream-ca: %v", err)
	}
}

func (s *suite) tlsRetryAfterHonoured(t *testing.T) {
	ctx := context.Background()
	s.eventually(t, time.Minute, "RetryPolicy flaky-upstream-tls Accepted and its CA rendered", func() (bool, string) {
		var rp v1alpha1.RetryPolicy
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "flaky-upstream-tls"}, &rp); err != nil {
			return false, err.Error()
		}
		acc := meta.FindStatusCondition(rp.Status.Conditions, "Accepted")
		return acc != nil && acc.Status == metav1.ConditionTrue && rp.Status.ObservedGeneration == rp.Generation, fmt.Sprintf("conditions %v", rp.Status.Conditions)
	})
	up := findUpstream(t, s.renderedPolicies(t), s.ns, "flaky-upstream-tls")
	if !strings.Contains(up.CABundle, "BEGIN CERTIFICATE") {
		t.Fatalf("rendered caBundle %q, want the CA of ConfigMap flaky-upstream-ca", up.CABundle)
	}
	var r report
	s.eventually(t, 2*time.Minute, "the sidecar to load the TLS policy (the kubelet refreshes the mounted ConfigMap)", func() (bool, string) {
		r = s.callHost(t, s.tlsHost(), "GET", "/retry-after/2", "")
		return r.outcome() != "", fmt.Sprintf("status %d, headers %v", r.Status, r.Headers)
	})
	r.want(t, http.StatusOK, "success", 2)
	for i, a := range r.Arrivals {
		if !a.TLS || a.SNI != s.tlsHost() {
			t.Errorf("arrival %d: TLS %v, SNI %q; want TLS with SNI %s", i+1, a.TLS, a.SNI, s.tlsHost())
		}
	}
	gap := r.Arrivals[1].At.Sub(r.Arrivals[0].At)
	t.Logf("over TLS: 429 Retry-After: 2 → retried %s later (at the upstream), outcome %s in %d ms\n%s", gap.Round(time.Millisecond), r.outcome(), r.ElapsedMillis, r.timeline())
	if gap < 2*time.Second || gap > 5*time.Second {
		t.Errorf("the retry arrived %s after the 429; want 2-2.5 s (Retry-After 2, spread 500ms)", gap)
	}
}
