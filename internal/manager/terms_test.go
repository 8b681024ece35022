package manager

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// termLog records when each term of either replica ran.
type termLog struct {
	mu      sync.Mutex
	active  int
	overlap bool
	spans   []string
}

func (l *termLog) runnable(who string) manager.RunnableFunc {
	return func(ctx context.Context) error {
		l.mu.Lock()
		l.active++
		if l.active > 1 {
			l.overlap = true
		}
		l.spans = append(l.spans, who+" began")
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		l.active--
		l.spans = append(l.spans, who+" ended")
		l.mu.Unlock()
		return nil
	}
}

func (l *termLog) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// Two replicas on a real API server: one term at a time; an API server away
// for longer than the renew deadline ends the leader's term without ending
// its process, and once it is back a term runs again within the retry
// period, with no two terms at once at any moment.
func TestTermsSurviveAnAPIServerAwayLongerThanTheLease(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t})))
	env := &envtest.Environment{}
	cfg := testenv.Start(t, env)
	// envtest's API server comes back with a serving certificate of a new
	// CA: the replicas skip verifying it (the restart is what is tested).
	cfg = rest.CopyConfig(cfg)
	cfg.CAData, cfg.Insecure = nil, true
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	log := &termLog{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	replicas := []*Terms{}
	for _, who := range []string{"a", "b"} {
		terms := &Terms{Config: cfg, Namespace: "ops", Name: "terms-test",
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			Log: ctrl.Log.WithName(who),
			NewTerm: func() (ctrl.Manager, error) {
				m, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
				if err != nil {
					return nil, err
				}
				return m, m.Add(log.runnable(who))
			}}
		replicas = append(replicas, terms)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := terms.Start(ctx); err != nil {
				t.Errorf("replica %s: Start returned %v", who, err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	waitFor := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %s (terms: %v)", what, within, log.spans)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitFor("a first term", 15*time.Second, func() bool { return log.running() == 1 })

	if err := env.ControlPlane.APIServer.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor("the leader's term to end with the API server away", 10*time.Second, func() bool { return log.running() == 0 })
	time.Sleep(2 * time.Second) // away for longer than the lease in all
	if err := env.ControlPlane.APIServer.Start(); err != nil {
		t.Fatal(err)
	}
	back := waitFor("a term after the API server returned", 15*time.Second, func() bool { return log.running() == 1 })
	time.Sleep(2 * time.Second)
	if n := log.running(); n != 1 {
		t.Errorf("%d terms running 2 s later, want 1", n)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.overlap {
		t.Errorf("two terms ran at once: %v", log.spans)
	}
	if total := replicas[0].Count() + replicas[1].Count(); total < 2 {
		t.Errorf("%d terms in all, want at least 2 (one before the outage, one after)", total)
	}
	t.Logf("a term ran again %s after the API server was back; terms: %v", back.Round(10*time.Millisecond), log.spans)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Refresh ends the running term's manager and serve builds a fresh one at
// once, in the same term; calls within refreshMinInterval of its start (the
// other dials that found the API server back) do nothing.
func TestRefreshBuildsTheTermsManagerAfresh(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"} // never asked: no informer is started
	log := &termLog{}
	built := 0
	var mu sync.Mutex
	terms := &Terms{Alone: true, Log: ctrl.Log.WithName("refresh"),
		NewTerm: func() (ctrl.Manager, error) {
			mu.Lock()
			built++
			who := fmt.Sprintf("manager %d", built)
			mu.Unlock()
			m, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
			if err != nil {
				return nil, err
			}
			return m, m.Add(log.runnable(who))
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = terms.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	until := func(what string, cond func() bool) {
		t.Helper()
		for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: not within 10 s (%v)", what, log.spans)
			}
		}
	}
	has := func(span string) func() bool {
		return func() bool { log.mu.Lock(); defer log.mu.Unlock(); return slices.Contains(log.spans, span) }
	}
	until("the first manager", has("manager 1 began"))
	terms.Refresh() // within refreshMinInterval of its start: ignored
	time.Sleep(refreshMinInterval + 100*time.Millisecond)
	terms.Refresh()
	until("a fresh manager", has("manager 2 began"))
	terms.Refresh() // the fresh one just started: ignored

	log.mu.Lock()
	defer log.mu.Unlock()
	want := []string{"manager 1 began", "manager 1 ended", "manager 2 began"}
	if !slices.Equal(log.spans, want) || log.overlap {
		t.Errorf("spans %v (overlap %t), want %v and no overlap", log.spans, log.overlap, want)
	}
	if terms.Count() != 1 || terms.Refreshed() != 1 {
		t.Errorf("%d terms, %d refreshed; want 1 term, refreshed once", terms.Count(), terms.Refreshed())
	}
}
