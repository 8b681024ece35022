package config_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestAPIWatchResumesWithoutListingAgain runs the watch against a real API
// server with watches that end every second: each ended watch is started
// again from the last resourceVersion (the RetryWatcher), the ConfigMap is
// listed once, at start, and an edit after several restarts still arrives.
func TestAPIWatchResumesWithoutListingAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	cfg := testenv.Start(t, nil)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns, r1, r2 = "shop", 1796083200, 1796083201
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.PoliciesConfigMapName},
		Data: map[string]string{v1alpha1.PoliciesConfigMapKey: policysettest.Rendered(t, policysettest.PolicyYAML("a.example", ""), r1)}}
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var lists, watches atomic.Int32
	client := countingClient(t, cfg, func(r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			watches.Add(1)
		} else {
			lists.Add(1)
		}
	})
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m := sidecar.NewMetrics()
	reloader := config.NewReloader(config.Sources{}, log, m)
	w := &config.APIWatch{Client: client, Namespace: ns, Reloader: reloader, Log: log, Metrics: m, WatchTimeout: time.Second}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })

	revision := func(want int64) func() bool {
		return func() bool { c := reloader.Current(); return c != nil && c.Revision == want }
	}
	polltest.UntilTrue(t, 5*time.Second, revision(r1))
	polltest.UntilTrue(t, 10*time.Second, func() bool { return watches.Load() >= 4 })

	cm.Data[v1alpha1.PoliciesConfigMapKey] = policysettest.Rendered(t, policysettest.PolicyYAML("a.example", ""), r2)
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.UntilTrue(t, 2*time.Second, revision(r2))
	if n := lists.Load(); n != 1 {
		t.Errorf("%d lists of retry-policies over %d watches, want 1", n, watches.Load())
	}
	if c := reloader.Current(); c.Source != config.SourceAPI {
		t.Errorf("configuration from %q, want %q", c.Source, config.SourceAPI)
	}
}

// countingClient is a core/v1 REST client of cfg, as NewAPIWatch builds one,
// that calls seen with every request it sends.
func countingClient(t *testing.T, cfg *rest.Config, seen func(*http.Request)) rest.Interface {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			seen(r)
			return rt.RoundTrip(r)
		})
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
