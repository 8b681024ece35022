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
// burst is half a second of the rate: a smaller one leaves part of the quota
// unused (docs/quota.md#choosing-burst).
const (
	quotaRate    = 20 // requestsPerSecond
	quotaBurst   = 10
	loadSeconds  = 20
	quotaSettle  = 2 * time.Second // left out of the measured window: the bucket starts full
	quotaTargetP = 0.02            // the fleet's admitted rate within ±2 % of the quota
)

// quotaLoads is the demand of the two consuming namespaces, in requests a second.
var quotaLoads = [2]int{30, 10}

// sharedQuota runs Debian's redis-server in the test namespace (image
// retry.dev/redis:dev), a SharedQuota on it whose consumers are two more
// namespaces, one RetryPolicy with quotaRef and one injected demo app in each,
// drives both above the quota at once and counts the arrivals at the flaky
// upstream.
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

	// The policies first: the manager creates the namespaces' Redis users and
	// their Secret retry-quota-credentials, which the pods then mount at start
	// (a Secret created later reaches a running pod only with the kubelet's sync).
	for _, ns := range consumers {
		s.applyTemplateIn(t, ns, "quota-policy.yaml", map[string]string{"QUOTA": quota})
	}
	for _, ns := range consumers {
		s.eventually(t, time.Minute, "policy "+ns+"/partner Accepted and Secret retry-quota-credentials", func() (bool, string) {
			var rp v1alpha1.RetryPolicy
			if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "partner"}, &rp); err != nil {
				return false, err.Error()
			}
			acc := meta.FindStatusCondition(rp.Status.Conditions, "Accepted")
			err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "retry-quota-credentials"}, &corev1.Secret{})
			return acc != nil && acc.Status == metav1.ConditionTrue && err == nil, fmt.Sprintf("Accepted %+v, Secret: %v", acc, err)
		})
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
	t.Logf("the SharedQuota case took %s", time.Since(start).Round(100*time.Millisecond))
}

// deployRedis writes the Redis configuration and the admin Secret (Secret
// <quota> in the manager's namespace, key password, as credentialsSecretRef
// wants it), deploys testdata/redis.yaml and returns the store's address:
// the Service's clusterIP and port.
func (s *suite) deployRedis(t *testing.T, quota string) string {
	t.Helper()
	ctx := context.Background()
	password := randomSuffix() + randomSuffix() + randomSuffix()
	conf := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "redis-config"}, StringData: map[string]string{
		"redis.conf": "port 6379\nprotected-mode no\nsave \"\"\nappendonly no\nrequirepass " + password + "\n",
	}}
	admin := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: quota},
		StringData: map[string]string{"password": password}}
	for _, sec := range []*corev1.Secret{conf, admin} {
		if err := s.c.Create(ctx, sec); err != nil {
			t.Fatalf("creating Secret %s/%s: %v", sec.Namespace, sec.Name, err)
		}
	}
	t.Cleanup(func() {
		if err := s.c.Delete(ctx, admin); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting Secret %s/%s: %v", admin.Namespace, admin.Name, err)
		}
	})
	s.applyTemplate(t, "redis.yaml", nil)
	s.waitDeploymentIn(t, s.ns, "redis")
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "redis"}, &svc); err != nil {
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
		errs    [2]error
	)
	for i, ns := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*loadSeconds*time.Second)
			defer cancel()
			params := map[string]string{"url": "http://flaky-upstream." + ns + ".svc/ok/" + ns,
				"rate": strconv.Itoa(quotaLoads[i]), "seconds": strconv.Itoa(loadSeconds)}
			body, err := s.cs.CoreV1().Services(ns).ProxyGet("http", "demo-app", "8080", "load", params).DoRaw(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("%s: /load: %w (%s)", ns, err, body)
				return
			}
			if err := json.Unmarshal(body, &reports[i]); err != nil {
				errs[i] = fmt.Errorf("%s: /load answered %q: %w", ns, body, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return reports
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
