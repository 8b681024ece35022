//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// The SharedQuota case (docs/quota.md): its rate and burst, and the load each
// consuming namespace drives, together twice the rate and uneven (3:1). The
// burst is half a second of the rate: a send time stays good for (burst − 1)
// ÷ rate, long enough for attempts that come between two leases
// (docs/quota.md#choosing-burst).
const (
	quotaRate    = 20 // requestsPerSecond
	quotaBurst   = 10
	loadSeconds  = 20
	quotaSettle  = 2 * time.Second // left out of the measured window: the fleet's first send times may be in the past
	quotaTargetP = 0.02            // the fleet's admitted rate within ±2 % of the quota
)

// quotaLoads is the demand of the two consuming namespaces, in requests a second.
var quotaLoads = [2]int{30, 10}

// sharedQuota runs Debian's redis-server in the manager's namespace (image
// retry.dev/redis:dev, labelled as a quota store: only the manager may reach
// it), a SharedQuota on it whose consumers are two more namespaces, one
// RetryPolicy with quotaRef and one injected demo app in each, drives both
// above the quota at once and counts the arrivals at the flaky upstream. The
// sidecars lease from the manager's lease endpoint with their pods' tokens.
// Then the second namespace is relabelled out of the consumers while its app
// keeps calling: it stops drawing at once (docs/quota.md#trust).
func (s *suite) sharedQuota(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	quota := "e2e-" + randomSuffix()
	redisAddr := s.deployRedis(t, quota)

	consumers := [2]string{s.ns + "-quota-a", s.ns + "-quota-b"}
	for _, ns := range consumers {
		s.createConsumerNamespace(t, ns, quota)
	}
	s.applyTemplate(t, "quota.yaml", map[string]string{"QUOTA": quota, "RATE": strconv.Itoa(quotaRate),
		"BURST": strconv.Itoa(quotaBurst), "REDIS_ADDRESS": redisAddr})
	t.Cleanup(func() {
		if err := s.c.Delete(ctx, &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: quota}}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting SharedQuota %s: %v", quota, err)
		}
	})

	for _, ns := range consumers {
		s.applyTemplateIn(t, ns, "quota-policy.yaml", map[string]string{"QUOTA": quota})
	}
	for _, ns := range consumers {
		s.eventually(t, time.Minute, "policy "+ns+"/partner Accepted", func() (bool, string) {
			var rp v1alpha1.RetryPolicy
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "partner"}, &rp); err != nil {
				return false, err.Error()
			}
			acc := meta.FindStatusCondition(rp.Status.Conditions, "Accepted")
			return acc != nil && acc.Status == metav1.ConditionTrue, fmt.Sprintf("Accepted %+v", acc)
		})
		// The sidecars hold no store credential: no Secret is made for them.
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "retry-quota-credentials"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s/retry-quota-credentials: %v, want none", ns, err)
		}
	}
	var upstream corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "flaky-upstream"}, &upstream); err != nil {
		t.Fatalf("reading the flaky-upstream Service: %v", err)
	}
	for _, ns := range consumers {
		s.applyTemplateIn(t, ns, "app.yaml", map[string]string{"UPSTREAM_IP": upstream.Spec.ClusterIP})
	}
	pods := [2]string{}
	for i, ns := range consumers {
		s.waitDeploymentIn(t, ns, "demo-app")
		pods[i] = s.podOfIn(t, ns, "demo-app").Name
		series := fmt.Sprintf(`retry_sidecar_quota_store_state{quota=%q,state="reachable"}`, quota)
		s.eventually(t, time.Minute, "the sidecar of "+ns+" to reach the store", func() (bool, string) {
			v := s.sidecarMetricIn(t, ns, pods[i], series)
			return v == 1, fmt.Sprintf("%s = %v", series, v)
		})
	}
	s.checkQuotaStatus(t, quota, consumers)
	t.Logf("Redis, SharedQuota %s (%d/s, burst %d) and a demo app in %v ready in %s", quota, quotaRate, quotaBurst, consumers, time.Since(start).Round(100*time.Millisecond))

	reports := s.driveLoads(t, consumers)
	var arrivals [2][]wire.Arrival
	for i, ns := range consumers {
		arrivals[i] = s.arrivalsOn(t, "/ok/"+ns)
		ok := 0
		for outcome, n := range reports[i].Outcomes {
			if strings.HasPrefix(outcome, "200 ") {
				ok += n
			}
		}
		t.Logf("%s: %d/s for %d s: sent %d, dropped %d, answers %v; %d arrivals at the upstream",
			ns, quotaLoads[i], loadSeconds, reports[i].Sent, reports[i].Dropped, reports[i].Outcomes, len(arrivals[i]))
		if ok != len(arrivals[i]) {
			t.Errorf("%s: %d answers 200, %d arrivals at the upstream; want one arrival per 200 (one attempt each)", ns, ok, len(arrivals[i]))
		}
		if min := quotaLoads[i] * loadSeconds * 9 / 10; reports[i].Sent < min {
			t.Errorf("%s: sent %d requests, want at least %d: the load did not run", ns, reports[i].Sent, min)
		}
	}
	checkQuotaArrivals(t, reports, arrivals)
	s.revokeConsumer(t, quota, consumers[1], pods[1])
	t.Logf("the SharedQuota case took %s", time.Since(start).Round(100*time.Millisecond))
}

// revokeSettle is how long after the relabel a revoked namespace's
// attempts may still arrive: the manager's cache learns the new labels
// through its watch (tens of milliseconds), then the namespace's next lease,
// within one lease interval (100 ms), is refused and its sidecar denies at
// once. 500 ms leaves the rest to the network and a loaded node.
const revokeSettle = 500 * time.Millisecond

// revokeConsumer relabels ns out of the quota's consumers while its app
// calls the upstream at quotaLoads[1] a second: its sidecar reports the state
// revoked, answers locally, and no attempt of it arrives later than
// revokeSettle after the relabel, although onStoreLoss is LastShare.
func (s *suite) revokeConsumer(t *testing.T, quota, ns, pod string) {
	t.Helper()
	ctx := context.Background()
	path := "/ok/" + ns + "/revoked"
	const seconds = 4
	done := make(chan wire.LoadReport, 1)
	go func() { done <- s.driveLoad(t, ns, path, quotaLoads[1], seconds) }()
	time.Sleep(1500 * time.Millisecond) // the load runs, drawing on the quota
	var obj corev1.Namespace
	if err := s.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
		t.Fatalf("reading namespace %s: %v", ns, err)
	}
	obj.Labels["e2e-quota"] = "none"
	if err := s.c.Update(ctx, &obj); err != nil {
		t.Fatalf("relabelling namespace %s: %v", ns, err)
	}
	relabelled := time.Now()
	report := <-done
	series := fmt.Sprintf(`retry_sidecar_quota_store_state{quota=%q,state="revoked"}`, quota)
	if v := s.sidecarMetricIn(t, ns, pod, series); v != 1 {
		t.Errorf("%s = %v after the relabel, want 1", series, v)
	}
	var before, late int
	var last time.Time
	for _, a := range s.arrivalsOn(t, path) {
		switch {
		case a.At.Before(relabelled):
			before++
		case a.At.Before(relabelled.Add(revokeSettle)):
			last = a.At
		default:
			late++
		}
	}
	t.Logf("%s: %d/s for %d s, relabelled out after 1.5 s: answers %v; %d arrivals before the relabel, the last one %s after it, %d later than %s",
		ns, quotaLoads[1], seconds, report.Outcomes, before, max(last.Sub(relabelled), 0).Round(time.Millisecond), late, revokeSettle)
	if before == 0 {
		t.Errorf("%s: no arrival before the relabel: the load did not draw on the quota", ns)
	}
	if late > 0 {
		t.Errorf("%s: %d attempts arrived more than %s after the namespace left the consumers, want 0", ns, late, revokeSettle)
	}
	s.eventually(t, time.Minute, "SharedQuota "+quota+" to list one consumer", func() (bool, string) {
		var q v1alpha1.SharedQuota
		if err := s.c.Get(ctx, client.ObjectKey{Name: quota}, &q); err != nil {
			return false, err.Error()
		}
		return q.Status.ConsumerCount == 1, fmt.Sprintf("consumers %v", q.Status.Consumers)
	})
}

// deployRedis writes the Redis configuration and the admin Secret (Secret
// <quota> in the manager's namespace, key password, as credentialsSecretRef
// wants it), deploys testdata/redis.yaml in the manager's namespace, where
// the NetworkPolicy of the install lets the manager alone reach it, and
// returns the store's address: the Service's clusterIP and port.
func (s *suite) deployRedis(t *testing.T, quota string) string {
	t.Helper()
	ctx := context.Background()
	password := randomSuffix() + randomSuffix() + randomSuffix()
	conf := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: quota + "-redis-config"}, StringData: map[string]string{
		"redis.conf": "port 6379\nprotected-mode no\nsave \"\"\nappendonly no\nrequirepass " + password + "\n",
	}}
	admin := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: quota},
		StringData: map[string]string{"password": password}}
	for _, sec := range []*corev1.Secret{conf, admin} {
		if err := s.c.Create(ctx, sec); err != nil {
			t.Fatalf("creating Secret %s/%s: %v", sec.Namespace, sec.Name, err)
		}
	}
	vars := map[string]string{"NAME": quota + "-redis"}
	s.applyTemplateIn(t, operatorNamespace, "redis.yaml", vars)
	t.Cleanup(func() {
		for _, o := range []client.Object{conf, admin,
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: vars["NAME"]}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: vars["NAME"]}}} {
			if err := s.c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("deleting %s/%s: %v", o.GetNamespace(), o.GetName(), err)
			}
		}
	})
	s.waitDeploymentIn(t, operatorNamespace, vars["NAME"])
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: vars["NAME"]}, &svc); err != nil {
		t.Fatalf("reading the redis Service: %v", err)
	}
	return svc.Spec.ClusterIP + ":6379"
}

// createConsumerNamespace makes namespace ns, injection enabled and labelled
// e2e-quota=<quota> (the SharedQuota's consumers), deleted after the case.
func (s *suite) createConsumerNamespace(t *testing.T, ns, quota string) {
	t.Helper()
	ctx := context.Background()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"retry.dev/injection": "enabled", "e2e-quota": quota}}}
	if err := s.c.Create(ctx, obj); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	// Registered before the quota's cleanup, so it runs after it.
	t.Cleanup(func() {
		if t.Failed() {
			for _, args := range [][]string{
				{"-n", ns, "logs", "-l", "app=demo-app", "-c", sidecarName, "--tail=100", "--prefix"},
				{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
				{"get", "sharedquotas", "-o", "yaml"},
			} {
				out, _ := s.kubectlRun(nil, args...)
				t.Logf("----- kubectl %v\n%s", args, out)
			}
		}
		if os.Getenv("E2E_KEEP_NAMESPACE") == "1" {
			t.Logf("E2E_KEEP_NAMESPACE=1: keeping namespace %s", ns)
			return
		}
		if err := s.c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", ns, err)
		}
	})
}

// waitDeploymentIn waits until Deployment name of ns has its one replica ready.
func (s *suite) waitDeploymentIn(t *testing.T, ns, name string) {
	t.Helper()
	s.eventually(t, 2*time.Minute, "Deployment "+ns+"/"+name+" to be available", func() (bool, string) {
		var d appsv1.Deployment
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 1 && d.Status.UpdatedReplicas == 1 && d.Status.Replicas == 1,
			fmt.Sprintf("ready %d, updated %d, total %d", d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas)
	})
}

// checkQuotaStatus waits until the SharedQuota is Ready, its store reachable,
// and its status lists the policy partner of each consuming namespace and
// their two pods.
func (s *suite) checkQuotaStatus(t *testing.T, quota string, consumers [2]string) {
	t.Helper()
	want := []v1alpha1.QuotaConsumer{
		{Namespace: consumers[0], Policy: "partner", Upstream: "partner"},
		{Namespace: consumers[1], Policy: "partner", Upstream: "partner"},
	}
	s.eventually(t, time.Minute, "SharedQuota "+quota+" Ready, StoreReachable, 2 consumers, 2 drawing pods", func() (bool, string) {
		var q v1alpha1.SharedQuota
		if err := s.c.Get(context.Background(), client.ObjectKey{Name: quota}, &q); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(q.Status.Conditions, "Ready")
		store := meta.FindStatusCondition(q.Status.Conditions, "StoreReachable")
		ok := ready != nil && ready.Status == metav1.ConditionTrue &&
			store != nil && store.Status == metav1.ConditionTrue && store.Reason == "Reachable" &&
			slices.Equal(q.Status.Consumers, want) && q.Status.ConsumerCount == 2 && q.Status.DrawingPods == 2
		return ok, fmt.Sprintf("Ready %+v, StoreReachable %+v, consumers %v (count %d), drawingPods %d; want consumers %v and 2 pods",
			ready, store, q.Status.Consumers, q.Status.ConsumerCount, q.Status.DrawingPods, want)
	})
}

// driveLoads makes the demo app of each namespace call /ok/<namespace> of the
// flaky upstream at its quotaLoads rate for loadSeconds, both at once.
func (s *suite) driveLoads(t *testing.T, consumers [2]string) [2]wire.LoadReport {
	t.Helper()
	var (
		wg      sync.WaitGroup
		reports [2]wire.LoadReport
	)
	for i, ns := range consumers {
		wg.Go(func() { reports[i] = s.driveLoad(t, ns, "/ok/"+ns, quotaLoads[i], loadSeconds) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return reports
}

// driveLoad makes the demo app of ns call path of the flaky upstream at rate
// a second for seconds, and returns its report (a zero one, the test marked
// failed, when the load could not run). Safe to call from another goroutine.
func (s *suite) driveLoad(t *testing.T, ns, path string, rate, seconds int) wire.LoadReport {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2*seconds)*time.Second)
	defer cancel()
	params := map[string]string{"url": "http://flaky-upstream." + ns + ".svc" + path,
		"rate": strconv.Itoa(rate), "seconds": strconv.Itoa(seconds)}
	var report wire.LoadReport
	body, err := s.cs.CoreV1().Services(ns).ProxyGet("http", "demo-app", "8080", "load", params).DoRaw(ctx)
	if err != nil {
		t.Errorf("%s: /load: %v (%s)", ns, err, body)
		return report
	}
	if err := json.Unmarshal(body, &report); err != nil {
		t.Errorf("%s: /load answered %q: %v", ns, body, err)
	}
	return report
}

// arrivalsOn reads the flaky upstream's arrivals on path.
func (s *suite) arrivalsOn(t *testing.T, path string) []wire.Arrival {
	t.Helper()
	return s.arrivalsWhere(t, "path", path)
}

// checkQuotaArrivals asserts, on the arrivals at the upstream, that the
// fleet's rate in the window where both loads ran (less quotaSettle at the
// start) is the quota's within quotaTargetP, that no interval saw more than
// rate × t + burst, and that both namespaces were served.
func checkQuotaArrivals(t *testing.T, reports [2]wire.LoadReport, arrivals [2][]wire.Arrival) {
	t.Helper()
	from := maxTime(reports[0].StartedAt, reports[1].StartedAt).Add(quotaSettle)
	to := minTime(reports[0].StoppedAt, reports[1].StoppedAt)
	all := slices.Concat(arrivals[0], arrivals[1])
	slices.SortFunc(all, func(a, b wire.Arrival) int { return a.At.Compare(b.At) })
	perSecond := make([]int, 0, loadSeconds+5)
	for _, a := range all {
		sec := max(int(a.At.Sub(reports[0].StartedAt).Seconds()), 0)
		for len(perSecond) <= sec {
			perSecond = append(perSecond, 0)
		}
		perSecond[sec]++
	}
	t.Logf("arrivals per second since the start of the load: %v", perSecond)
	var in [2]int
	for i := range arrivals {
		for _, a := range arrivals[i] {
			if !a.At.Before(from) && a.At.Before(to) {
				in[i]++
			}
		}
	}
	window := to.Sub(from).Seconds()
	rate := float64(in[0]+in[1]) / window
	dev := rate/quotaRate - 1
	t.Logf("window %.2f s: %d + %d arrivals = %.2f/s against the quota's %d/s: %+.2f %%; shares %.0f %% / %.0f %% (demand %d:%d)",
		window, in[0], in[1], rate, quotaRate, 100*dev,
		100*float64(in[0])/float64(in[0]+in[1]), 100*float64(in[1])/float64(in[0]+in[1]), quotaLoads[0], quotaLoads[1])
	if math.Abs(dev) > quotaTargetP {
		t.Errorf("the fleet's admitted rate is %.2f/s, %+.2f %% off the quota's %d/s; want within ±%.0f %%", rate, 100*dev, quotaRate, 100*quotaTargetP)
	}
	// rate × t + burst over every interval between two arrivals, the whole run
	// included. The store bounds the starts; the upstream stamps arrivals after
	// the network, which may bring two starts a few milliseconds closer: one
	// arrival is allowed for that.
	worst, wi, wj := math.Inf(-1), 0, 0
	for i := range all {
		for j := i; j < len(all); j++ {
			excess := float64(j-i+1) - quotaRate*all[j].At.Sub(all[i].At).Seconds()
			if excess > worst {
				worst, wi, wj = excess, i, j
			}
		}
	}
	t.Logf("most arrivals above rate × t in any interval: %.2f (burst %d), %d arrivals in %s", worst, quotaBurst, wj-wi+1, all[wj].At.Sub(all[wi].At).Round(time.Millisecond))
	if worst > quotaBurst+1 {
		t.Errorf("%d arrivals in %s: %.2f above rate × t, more than burst %d (+1 for the network)", wj-wi+1, all[wj].At.Sub(all[wi].At).Round(time.Millisecond), worst, quotaBurst)
	}
	for i := range in {
		if share := float64(in[i]) / float64(in[0]+in[1]); share < 0.10 {
			t.Errorf("consumer %d (demand %d/s) got %.0f %% of the arrivals; want both namespaces served (≥ 10 %%)", i, quotaLoads[i], 100*share)
		}
	}
	if sent := float64(reports[0].Sent+reports[1].Sent) / loadSeconds; sent < 1.5*quotaRate {
		t.Errorf("the load was %.1f/s, want well above the quota's %d/s", sent, quotaRate)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
