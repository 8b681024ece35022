//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// The chaos run (make test-chaos, docs/development.md#the-chaos-run): cycles
// of one fault each, under steady traffic through injected sidecars, and after
// each the control plane's promises checked. The bounds are the product's own.
const (
	// chaosRecovery: admission back, and an edit made then Programmed with
	// every sidecar on its revision, within this of the fault's end.
	chaosRecovery = 5 * time.Second
	// chaosLoad is how long each cycle's quota load runs: the fault, its
	// recovery and the edit all fall inside it.
	chaosLoad = 24 * time.Second
	// chaosQuotaRate and chaosQuotaBurst are the quota the load runs against
	// at 1.5 × its rate.
	chaosQuotaRate, chaosQuotaBurst = 20, 10
	// chaosAttempts is the e2e policy's maxAttempts (testdata/policy.yaml).
	chaosAttempts = 4
)

// chaosFault is one fault: inject makes it and returns once it is over (the
// component back, or the cut restored).
type chaosFault struct {
	name   string
	inject func(s *suite, t *testing.T, w *chaosWorld)
}

var chaosFaults = []chaosFault{
	{"API server restarted", (*suite).chaosAPIServer},
	{"leader killed mid-reconcile", (*suite).chaosLeaderKilled},
	{"sidecar killed with requests in flight", (*suite).chaosSidecarKilled},
	{"quota store restarted", (*suite).chaosStoreRestarted},
	{"a manager replica's network cut for 10 s", (*suite).chaosReplicaCut},
	{"certificate Secret deleted by hand", (*suite).chaosSecretDeleted},
	{"a caBundle emptied by hand", (*suite).chaosCABundleEmptied},
}

// The objects the last two faults break, as dist/install-selfsigned.yaml
// names them.
const (
	chaosCertSecret       = "retry-operator-webhook-server-cert"
	chaosValidatingConfig = "retry-operator-validating-webhook-configuration"
)

// chaosWorld is what the faults act on and the checks read.
type chaosWorld struct {
	quota, consumer string // the SharedQuota and the namespace drawing on it
	store           string // the store's Deployment in the operator's namespace
	consumerPod     podDirect
	app             podDirect // the e2e app pod, whose sidecar carries the retries
	cuts            int       // network cuts so far: they alternate leader and follower
	traffic         *chaosTraffic
	// handover, after a leader kill, says how the Lease changed hands
	// (watchHandover); nil otherwise.
	handover <-chan string
}

// chaosRow is one cycle's line of the table.
type chaosRow struct {
	cycle                 int
	fault                 string
	took, admit, edit     time.Duration
	calls, worst, maxQuot int
	replayed              int
	problems              []string
}

// TestChaos: make test-chaos (E2E_CHAOS=1 on the local cluster). E2E_CHAOS_CYCLES
// sets the number of cycles (20), E2E_CHAOS_FAULTS the faults taken in turn
// (words of their names, comma-separated, e.g. "API server"; all by default).
func TestChaos(t *testing.T) {
	if os.Getenv("E2E_CHAOS") == "" {
		t.Skip("the chaos run: make test-chaos (E2E_CHAOS=1)")
	}
	if os.Getenv("E2E_LOCAL_CLUSTER") == "" {
		t.Skip("the faults need the local cluster's processes (E2E_CLUSTER=local)")
	}
	cycles := 20
	if n, err := strconv.Atoi(os.Getenv("E2E_CHAOS_CYCLES")); err == nil && n > 0 {
		cycles = n
	}
	s := newSuite(t)
	start := time.Now()
	s.createNamespace(t)
	s.deployOperator(t)
	s.deployWorkloads(t)
	w := s.chaosSetup(t)
	t.Logf("chaos: set up in %s; %d cycles", time.Since(start).Round(time.Second), cycles)

	faults := chaosFaultsFrom(os.Getenv("E2E_CHAOS_FAULTS"))
	var rows []chaosRow
	for i := range cycles {
		f := faults[i%len(faults)]
		rows = append(rows, s.chaosCycle(t, i+1, f, w))
	}
	failed := chaosTable(t, rows)
	t.Logf("chaos: %d cycles in %s, %d failed", cycles, time.Since(start).Round(time.Second), failed)
	if failed > 0 {
		t.Errorf("%d of %d cycles broke a promise (table above)", failed, cycles)
	}
}

// chaosFaultsFrom are the faults whose names contain one of the
// comma-separated words of list, all of them for an empty list.
func chaosFaultsFrom(list string) []chaosFault {
	var out []chaosFault
	for _, f := range chaosFaults {
		for w := range strings.SplitSeq(list, ",") {
			if w = strings.TrimSpace(w); w != "" && strings.Contains(f.name, w) {
				out = append(out, f)
				break
			}
		}
	}
	if len(out) == 0 {
		return chaosFaults
	}
	return out
}

// chaosSetup adds a SharedQuota on a store in the operator's namespace, a
// consumer namespace with a policy drawing on it and an injected app, and
// starts the steady retry traffic through the e2e app.
func (s *suite) chaosSetup(t *testing.T) *chaosWorld {
	t.Helper()
	ctx := context.Background()
	quota := "chaos-" + randomSuffix()
	addr := s.deployRedis(t, quota)
	consumer := s.ns + "-chaos"
	s.createConsumerNamespace(t, consumer, quota)
	s.applyTemplate(t, "quota.yaml", map[string]string{"QUOTA": quota, "RATE": strconv.Itoa(chaosQuotaRate),
		"BURST": strconv.Itoa(chaosQuotaBurst), "REDIS_ADDRESS": addr})
	t.Cleanup(func() { _ = s.c.Delete(ctx, &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: quota}}) })
	s.applyTemplateIn(t, consumer, "quota-policy.yaml", map[string]string{"QUOTA": quota})
	var upstream corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "flaky-upstream"}, &upstream); err != nil {
		t.Fatal(err)
	}
	s.applyTemplateIn(t, consumer, "app.yaml", map[string]string{"UPSTREAM_IP": upstream.Spec.ClusterIP})
	s.waitDeploymentIn(t, consumer, "demo-app")
	pod := s.podOfIn(t, consumer, "demo-app")
	w := &chaosWorld{quota: quota, consumer: consumer, store: quota + "-redis",
		consumerPod: podDirect{ip: pod.Status.PodIP}, app: podDirect{ip: s.liveAppPod(t).Status.PodIP}}
	series := fmt.Sprintf(`retry_sidecar_quota_store_state{quota=%q,state="reachable"}`, quota)
	s.eventually(t, time.Minute, "the consumer's sidecar to reach the quota", func() (bool, string) {
		v, err := w.consumerPod.metric(series)
		return err == nil && v == 1, fmt.Sprintf("%s = %v (%v)", series, v, err)
	})
	w.traffic = startChaosTraffic(t, w.app, s.upstream)
	return w
}

// chaosCycle runs one fault under load and checks the promises after it.
func (s *suite) chaosCycle(t *testing.T, cycle int, f chaosFault, w *chaosWorld) chaosRow {
	row := chaosRow{cycle: cycle, fault: f.name}
	path := fmt.Sprintf("/ok/chaos-%d-%s", cycle, randomSuffix())
	load := make(chan error, 1)
	go func() {
		load <- w.consumerPod.load("http://flaky-upstream."+w.consumer+".svc"+path, chaosQuotaRate*3/2, chaosLoad)
	}()
	w.traffic.reset()
	time.Sleep(2 * time.Second) // load and traffic flowing before the fault
	begin := time.Now()
	f.inject(s, t, w)
	ended := time.Now()
	row.took = ended.Sub(begin)
	row.admit = s.chaosAdmission(t, ended)
	row.edit = s.chaosEdit(t, cycle, w)
	if w.handover != nil {
		t.Logf("chaos: cycle %d: %s", cycle, <-w.handover)
		w.handover = nil
	}
	if err := <-load; err != nil {
		row.problems = append(row.problems, "quota load: "+err.Error())
	}
	row.calls, row.worst, row.replayed = w.traffic.result()
	row.maxQuot = maxInOneSecond(s.arrivalsOn(t, path))
	row.problems = append(row.problems, row.check()...)
	t.Logf("chaos: cycle %d, %s: over after %s; admission back %s later, an edit programmed on every sidecar %s after it was accepted; %d calls, at most %d arrivals each; at most %d quota arrivals in 1 s",
		cycle, f.name, row.took.Round(100*time.Millisecond), row.admit.Round(10*time.Millisecond), row.edit.Round(10*time.Millisecond), row.calls, row.worst, row.maxQuot)
	return row
}

// check compares a row with the promises.
func (r chaosRow) check() []string {
	var p []string
	if r.admit > chaosRecovery {
		p = append(p, fmt.Sprintf("admission back after %s (> %s)", r.admit.Round(10*time.Millisecond), chaosRecovery))
	}
	if r.edit > chaosRecovery {
		p = append(p, fmt.Sprintf("edit programmed after %s (> %s)", r.edit.Round(10*time.Millisecond), chaosRecovery))
	}
	if r.replayed > 0 {
		p = append(p, fmt.Sprintf("%d POSTs without an Idempotency-Key arrived more than once", r.replayed))
	}
	if r.worst > chaosAttempts {
		p = append(p, fmt.Sprintf("a request arrived %d times (maxAttempts %d)", r.worst, chaosAttempts))
	}
	if r.maxQuot > chaosQuotaRate+chaosQuotaBurst+1 { // the upstream stamps arrivals after the network: one more
		p = append(p, fmt.Sprintf("%d quota arrivals in 1 s (R + burst = %d)", r.maxQuot, chaosQuotaRate+chaosQuotaBurst))
	}
	if r.calls == 0 {
		p = append(p, "no call of the steady traffic was answered")
	}
	return p
}

// chaosTable prints the table and returns the number of failed cycles.
func chaosTable(t *testing.T, rows []chaosRow) int {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-5s %-42s %8s %10s %10s %6s %6s %6s  %s\n", "cycle", "fault", "fault", "admission", "edit", "calls", "worst", "quota", "result")
	failed := 0
	for _, r := range rows {
		result := "ok"
		if len(r.problems) > 0 {
			result, failed = "FAIL: "+strings.Join(r.problems, "; "), failed+1
		}
		fmt.Fprintf(&b, "%-5d %-42s %7.1fs %9.2fs %9.2fs %6d %6d %6d  %s\n", r.cycle, r.fault, r.took.Seconds(),
			r.admit.Seconds(), r.edit.Seconds(), r.calls, r.worst, r.maxQuot, result)
	}
	t.Logf("chaos: cycle × fault × recovery (fault: its length; admission: from its end until a RetryPolicy is admitted; edit: from an edit's acceptance until Programmed on every sidecar; worst: most arrivals of one request, maxAttempts %d; quota: most arrivals in 1 s, R + burst %d):%s",
		chaosAttempts, chaosQuotaRate+chaosQuotaBurst, b.String())
	return failed
}

// ---------------------------------------------------------------------------
// The faults

func (s *suite) chaosAPIServer(t *testing.T, _ *chaosWorld) {
	s.localCluster(t, "stop-apiserver")
	time.Sleep(3 * time.Second)
	s.localCluster(t, "start-apiserver")
}

// chaosLeaderKilled deletes the leader's pod without a grace period while a
// burst of edits is being reconciled.
func (s *suite) chaosLeaderKilled(t *testing.T, w *chaosWorld) {
	leader := s.leaderPod(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 5 {
			s.tryPatchPolicy(fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/perTryTimeout","value":"%ds"}]`, 4+i%2))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// The dying leader's last words, followed live: its pod and logs are
	// gone as soon as it exits.
	var last syncLog
	follow := exec.Command(s.kubectl, "logs", "-f", "-n", operatorNamespace, leader, "--since=2s")
	follow.Stdout, follow.Stderr = &last, &last
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	running := map[string]bool{}
	for _, p := range s.managerPods(t) {
		running[p.Name] = p.Name != leader
	}
	killed := time.Now()
	s.kubectlOut(t, nil, "delete", "pod", "-n", operatorNamespace, leader, "--grace-period=0", "--force", "--wait=false")
	w.handover = s.watchHandover(leader, running, killed, func() string {
		_ = follow.Process.Kill()
		_ = follow.Wait()
		return last.String()
	})
	wg.Wait()
}

// syncLog is a buffer a command writes to while a test reads it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// watchHandover follows the Lease from the kill of leader's pod at killed
// until another replica holds it, at most 30 s, and says how it went: whether
// the killed leader released it (the holder emptied, ReleaseOnCancel) or it
// had to expire, and whether a replica that was running took it or the pod
// that replaced the killed one (others: the replicas running besides the
// leader before the kill). A slow edit after a leader kill is one of
// these, and they have different causes; for one, the message carries the
// killed leader's last log lines (lastWords, which also stops following
// them) and the other replicas'.
func (s *suite) watchHandover(leader string, others map[string]bool, killed time.Time, lastWords func() string) <-chan string {
	out := make(chan string, 1)
	go func() {
		defer func() { _ = lastWords() }() // stops following the leader's log
		var released time.Duration
		for time.Since(killed) < 30*time.Second {
			var lease coordinationv1.Lease
			err := s.c.Get(context.Background(), types.NamespacedName{Namespace: operatorNamespace, Name: manager.LeaderElectionID}, &lease)
			holder := ""
			if err == nil && lease.Spec.HolderIdentity != nil {
				holder, _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
			}
			if err == nil && holder == "" && released == 0 {
				released = time.Since(killed)
			}
			if holder != "" && holder != leader {
				how := "not released (expired)"
				if released > 0 {
					how = fmt.Sprintf("released after %s", released.Round(10*time.Millisecond))
				}
				who := "the pod that replaced it"
				if others[holder] {
					who = "the replica that was running"
				}
				took := time.Since(killed)
				msg := fmt.Sprintf("lease of the killed leader %s: %s; taken by %s (%s) %s after the kill",
					leader, how, holder, who, took.Round(10*time.Millisecond))
				if took > 5*time.Second {
					msg += "\n----- the killed leader's log from 2 s before the kill:\n" + lastWords() + s.replicaLogs(others)
				}
				out <- msg
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		out <- fmt.Sprintf("lease of the killed leader %s: no other holder 30 s after the kill", leader)
	}()
	return out
}

// replicaLogs is the last minute of the logs of the replicas named true in
// pods: what a replica that should have taken the Lease was doing instead.
func (s *suite) replicaLogs(pods map[string]bool) string {
	var b strings.Builder
	for name, ok := range pods {
		if !ok {
			continue
		}
		out, err := exec.Command(s.kubectl, "logs", "-n", operatorNamespace, name, "--since=60s", "--tail=60").CombinedOutput()
		fmt.Fprintf(&b, "\n----- %s, the last minute (err %v):\n%s", name, err, out)
	}
	return b.String()
}

// chaosSidecarKilled kills the e2e app's sidecar (SIGKILL) while the steady
// traffic's requests are in flight through it, and returns once the kubelet
// has restarted it and it is ready. The restart is awaited by its count: the
// pod stays Ready until the kubelet notices the kill, and the kubelet's
// restart back-off (10 s, then 20 s… for a container killed again within
// 10 min) is the fault's length, not the control plane's recovery.
func (s *suite) chaosSidecarKilled(t *testing.T, _ *chaosWorld) {
	pod := s.liveAppPod(t)
	before, _ := sidecarRestarts(&pod)
	s.localCluster(t, "kill-container", s.ns, pod.Name, sidecarName)
	s.eventually(t, time.Minute, "the killed sidecar to be restarted and ready", func() (bool, string) {
		var p corev1.Pod
		if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &p); err != nil {
			return false, err.Error()
		}
		n, ready := sidecarRestarts(&p)
		return n > before && ready && podReady(&p), fmt.Sprintf("sidecar restarts %d (%d before the kill), ready %t", n, before, ready)
	})
}

// sidecarRestarts is the retry-sidecar container's restart count and
// readiness in p.
func sidecarRestarts(p *corev1.Pod) (int32, bool) {
	for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if st.Name == sidecarName {
			return st.RestartCount, st.Ready
		}
	}
	return 0, false
}

// chaosStoreRestarted kills the store's container and returns once it is
// Ready again.
func (s *suite) chaosStoreRestarted(t *testing.T, w *chaosWorld) {
	pod := s.podOfIn(t, operatorNamespace, w.store)
	s.localCluster(t, "kill-container", operatorNamespace, pod.Name, "redis")
	s.eventually(t, time.Minute, "the store to be ready again", func() (bool, string) {
		var p corev1.Pod
		if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &p); err != nil {
			return false, err.Error()
		}
		return podReady(&p), "store pod not ready"
	})
}

// chaosReplicaCut cuts one manager replica off the network for 10 s: the
// leader on odd cuts, a follower on even ones.
func (s *suite) chaosReplicaCut(t *testing.T, w *chaosWorld) {
	w.cuts++
	leader := s.leaderPod(t)
	target := leader
	if w.cuts%2 == 0 {
		for _, p := range s.managerPods(t) {
			if p.Name != leader {
				target = p.Name
			}
		}
	}
	s.localCluster(t, "cut-network", operatorNamespace, target, "10")
}

// chaosSecretDeleted deletes the webhook certificate Secret and returns once
// the leader has written it back and said so in an event on it.
func (s *suite) chaosSecretDeleted(t *testing.T, _ *chaosWorld) {
	begin := time.Now()
	s.kubectlOut(t, nil, "delete", "secret", "-n", operatorNamespace, chaosCertSecret, "--wait=false")
	s.awaitRepairEvent(t, operatorNamespace, v1alpha1.EventReasonCertificateRepaired, begin)
}

// chaosCABundleEmptied empties the validating webhook's caBundle and returns
// once the leader has filled it again and said so in an event.
func (s *suite) chaosCABundleEmptied(t *testing.T, _ *chaosWorld) {
	begin := time.Now()
	s.kubectlOut(t, nil, "patch", "validatingwebhookconfiguration", chaosValidatingConfig, "--type=json",
		"-p", `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":""}]`)
	// A cluster-scoped object's events are in namespace default.
	s.awaitRepairEvent(t, metav1.NamespaceDefault, v1alpha1.EventReasonCABundleRepaired, begin)
}

// awaitRepairEvent waits, as long as the recovery promise, for an event of
// reason in ns observed after begin, and logs its note.
func (s *suite) awaitRepairEvent(t *testing.T, ns, reason string, begin time.Time) {
	t.Helper()
	s.eventually(t, chaosRecovery, "an event "+reason, func() (bool, string) {
		var list eventsv1.EventList
		if err := s.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			last := e.EventTime.Time
			if e.Series != nil {
				last = e.Series.LastObservedTime.Time
			}
			if e.Reason == reason && last.After(begin.Add(-time.Second)) { // the node's clock and ours
				t.Logf("chaos: event %s on %s/%s: %s", reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
				return true, ""
			}
		}
		return false, fmt.Sprintf("no %s event in namespace %s since the fault", reason, ns)
	})
}

// leaderPod is the pod whose replica holds the Lease (its identity is the
// pod's host name, then "_" and a random suffix).
func (s *suite) leaderPod(t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	var name string
	s.eventually(t, time.Minute, "a leader", func() (bool, string) {
		err := s.c.Get(context.Background(), types.NamespacedName{Namespace: operatorNamespace, Name: manager.LeaderElectionID}, &lease)
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, fmt.Sprint(err)
		}
		name, _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
		return slices.ContainsFunc(s.managerPods(t), func(p corev1.Pod) bool { return p.Name == name }), "holder " + name
	})
	return name
}

// ---------------------------------------------------------------------------
// The checks

// chaosAdmission is the time from ended until the API server admits a
// RetryPolicy (a dry run through the validating webhook).
func (s *suite) chaosAdmission(t *testing.T, ended time.Time) time.Duration {
	t.Helper()
	rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "chaos-probe"},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "probe", Hosts: []string{"chaos.invalid"}}}}}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tried := time.Now()
		err := s.c.Create(ctx, rp.DeepCopy(), client.DryRunAll)
		cancel()
		if err == nil {
			return time.Since(ended)
		}
		// Which hop refused or hung (the API server's message names the
		// webhook call's error): the evidence a slow recovery needs.
		t.Logf("chaos: admission try %s after the fault failed in %s: %v",
			tried.Sub(ended).Round(10*time.Millisecond), time.Since(tried).Round(10*time.Millisecond), err)
		if time.Since(ended) > 2*time.Minute {
			t.Fatalf("admission not back 2 min after the fault: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chaosEdit changes the e2e policy's deadline and returns the time from the
// accepted edit until it is Programmed, at its generation, on every selected
// pod, and the app's sidecar runs the ConfigMap's revision. It logs when each
// hop was first seen done: a slow edit says which hop held it.
func (s *suite) chaosEdit(t *testing.T, cycle int, w *chaosWorld) time.Duration {
	t.Helper()
	before := s.renderedRevision()
	s.patchPolicy(t, fmt.Sprintf(`[{"op":"replace","path":"/spec/upstreams/0/deadline","value":"%ds"}]`, 10+cycle%2))
	accepted := time.Now()
	var hops [3]time.Duration // rendered, on the app's sidecar, Programmed in the status
	for {
		done := s.chaosHops(w, before)
		for i, ok := range done {
			if ok && hops[i] == 0 {
				hops[i] = time.Since(accepted)
			}
		}
		if done[0] && done[1] && done[2] {
			t.Logf("chaos: cycle %d: the edit rendered into the ConfigMap %s after it was accepted, on the app's sidecar %s, Programmed on every pod %s",
				cycle, hops[0].Round(10*time.Millisecond), hops[1].Round(10*time.Millisecond), hops[2].Round(10*time.Millisecond))
			return time.Since(accepted)
		}
		if time.Since(accepted) > 2*time.Minute {
			t.Fatalf("the edit of cycle %d is not programmed 2 min later (hops seen: %v)", cycle, hops)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// renderedRevision is the revision of the e2e namespace's policies.json, 0
// when it cannot be read.
func (s *suite) renderedRevision() int64 {
	var cm corev1.ConfigMap
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: v1alpha1.PoliciesConfigMapName}, &cm); err != nil {
		return 0
	}
	var doc struct {
		Revision int64 `json:"revision"`
	}
	_ = json.Unmarshal([]byte(cm.Data[v1alpha1.PoliciesConfigMapKey]), &doc) // unreadable: 0
	return doc.Revision
}

// chaosHops says which hops of an edit made after revision before are done:
// a newer revision rendered into the ConfigMap, the app's sidecar running the
// ConfigMap's revision, and the policy Programmed at its generation on every
// selected pod.
func (s *suite) chaosHops(w *chaosWorld, before int64) [3]bool {
	var done [3]bool
	rendered := s.renderedRevision()
	done[0] = rendered > before
	if got, err := w.app.config(); err == nil {
		done[1] = done[0] && got.Revision >= rendered
	}
	var rp v1alpha1.RetryPolicy
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: policyName}, &rp); err == nil {
		c := meta.FindStatusCondition(rp.Status.Conditions, string(v1alpha1.ConditionProgrammed))
		done[2] = c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == rp.Generation &&
			rp.Status.ProgrammedPods == rp.Status.SelectedPods
	}
	return done
}

// maxInOneSecond is the most arrivals in any window of one second.
func maxInOneSecond(arr []wire.Arrival) int {
	at := make([]time.Time, 0, len(arr))
	for _, a := range arr {
		at = append(at, a.At)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, j := 0, 0; j < len(at); j++ {
		for at[j].Sub(at[i]) >= time.Second {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// load runs the demo app's open-loop load of GETs of target at rate for d,
// reached at the pod's IP (the API server may be away meanwhile).
func (p podDirect) load(target string, rate int, d time.Duration) error {
	q := url.Values{"url": {target}, "rate": {strconv.Itoa(rate)}, "seconds": {strconv.Itoa(int(d.Seconds()))}}
	b, err := p.get(":8080/load?" + q.Encode())
	if err != nil {
		return err
	}
	var r wire.LoadReport
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("/load answered %q: %w", b, err)
	}
	if r.Sent == 0 {
		return fmt.Errorf("/load sent nothing: %+v", r)
	}
	return nil
}

// tryPatchPolicy patches the e2e policy, ignoring a refusal (a burst of
// edits while the leader dies).
func (s *suite) tryPatchPolicy(jsonPatch string) {
	rp := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: policyName}}
	_ = s.c.Patch(context.Background(), rp, client.RawPatch(types.JSONPatchType, []byte(jsonPatch)))
}

// ---------------------------------------------------------------------------
// The steady traffic

// chaosTraffic calls the flaky upstream through the e2e app's sidecar every
// 100 ms, alternating a GET and a POST without an Idempotency-Key of a path
// that always answers 503, and keeps the most arrivals one call caused: a GET
// may arrive up to maxAttempts times, the POST once.
type chaosTraffic struct {
	mu                     sync.Mutex
	calls, worst, replayed int // replayed: POSTs that arrived more than once
}

func startChaosTraffic(t *testing.T, app podDirect, upstream string) *chaosTraffic {
	tr := &chaosTraffic{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			method := "GET"
			if i%2 == 1 {
				method = "POST"
			}
			r, err := app.call(upstream, method, "/always-503")
			if err == nil && r.Error == "" {
				tr.record(method, len(r.Arrivals))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tr
}

func (tr *chaosTraffic) record(method string, arrivals int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.calls++
	tr.worst = max(tr.worst, arrivals)
	if method == "POST" && arrivals > 1 {
		tr.replayed++
	}
}

func (tr *chaosTraffic) reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.calls, tr.worst, tr.replayed = 0, 0, 0
}

func (tr *chaosTraffic) result() (calls, worst, replayed int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.calls, tr.worst, tr.replayed
}
