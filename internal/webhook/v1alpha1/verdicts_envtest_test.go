package v1alpha1

// The differential test of the three places a RetryPolicy is judged: the API
// server (CRD schema, CEL and this validating webhook, in envtest), the Go
// validation (v1alpha1.Validate) and every sidecar (the manager's rendering
// compiled by policyset and retrypolicy.Compile). They must give the same
// verdict on every upstream (docs/policy.md#where-the-rules-live).
//
// Under -fuzz the API server and the webhook run in the coordinating process
// (started in TestMain before the fuzzing workers are spawned); the workers
// reach them through the environment, so no worker owns an API server that
// could outlive it.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// apiServerEnv carries the API server's address and credentials to fuzzing workers.
const apiServerEnv = "RETRY_VERDICTS_APISERVER"

const verdictNamespace = "verdicts"

var apiServer struct {
	once    sync.Once
	cl      client.Client
	err     error
	cleanup []func()
}

// TestMain starts the API server before the fuzzing workers when fuzzing, and
// stops whatever was started once the tests are done.
func TestMain(m *testing.M) {
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	fuzzing := flag.Lookup("test.fuzz").Value.String() != ""
	worker := flag.Lookup("test.fuzzworker").Value.String() == "true"
	if fuzzing && !worker {
		if _, err := verdictClient(); err != nil {
			os.Stderr.WriteString("starting the API server: " + err.Error() + "\n")
			os.Exit(1)
		}
	}
	code := m.Run()
	for i := len(apiServer.cleanup) - 1; i >= 0; i-- {
		apiServer.cleanup[i]()
	}
	os.Exit(code)
}

// verdictClient returns a client of the API server: the coordinator's when
// apiServerEnv is set, else one started here with the CRD and this webhook.
func verdictClient() (client.Client, error) {
	apiServer.once.Do(func() {
		scheme := runtime.NewScheme()
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			apiServer.err = err
			return
		}
		if s := os.Getenv(apiServerEnv); s != "" {
			var a apiServerAddress
			if err := json.Unmarshal([]byte(s), &a); err != nil {
				apiServer.err = err
				return
			}
			apiServer.cl, apiServer.err = client.New(&rest.Config{Host: a.Host, TLSClientConfig: rest.TLSClientConfig{
				CAData: a.CA, CertData: a.Cert, KeyData: a.Key}}, client.Options{Scheme: scheme})
			return
		}
		apiServer.cl, apiServer.err = startVerdictServer(scheme)
	})
	return apiServer.cl, apiServer.err
}

func startVerdictServer(scheme *runtime.Scheme) (client.Client, error) {
	tb := &recordingTB{}
	env := &envtest.Environment{WebhookInstallOptions: envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(testenv.ModuleRoot(), "config", "webhook", "manifests.yaml")},
	}}
	cfg, err := func() (cfg *rest.Config, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = errors.New(tb.msg)
			}
		}()
		return testenv.Start(tb, env), nil
	}()
	apiServer.cleanup = append(apiServer.cleanup, tb.cleanups...)
	if err != nil {
		return nil, err
	}
	wio := &env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	if err != nil {
		return nil, err
	}
	if err := SetupWithManager(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	apiServer.cleanup = append(apiServer.cleanup, func() { cancel(); <-done })
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	started := mgr.GetWebhookServer().StartedChecker()
	for deadline := time.Now().Add(30 * time.Second); started(nil) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, errors.New("the webhook server did not start in 30s")
		}
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": verdictNamespace}}}
	if err := cl.Create(context.Background(), ns); err != nil {
		return nil, err
	}
	blob, err := json.Marshal(apiServerAddress{Host: cfg.Host, CA: cfg.CAData, Cert: cfg.CertData, Key: cfg.KeyData})
	if err != nil {
		return nil, err
	}
	return cl, os.Setenv(apiServerEnv, string(blob))
}

// apiServerAddress is what a fuzzing worker needs to reach the API server.
type apiServerAddress struct {
	Host          string
	CA, Cert, Key []byte
}

// recordingTB is the testing.TB testenv.Start needs outside a test: it keeps
// the cleanups for TestMain and turns a fatal error into a panic.
type recordingTB struct {
	testing.TB
	cleanups []func()
	msg      string
}

func (r *recordingTB) Helper()             {}
func (r *recordingTB) Cleanup(f func())    { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Logf(string, ...any) {}
func (r *recordingTB) Fatalf(f string, a ...any) {
	r.msg = fmt.Sprintf(f, a...)
	panic(r.msg)
}

// apiServerVerdict creates obj with a server-side dry run: nil is accepted, an
// Invalid or BadRequest error rejected; anything else fails the test.
func apiServerVerdict(t *testing.T, obj map[string]any) error {
	t.Helper()
	cl, err := verdictClient()
	if err != nil {
		t.Fatalf("API server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = cl.Create(ctx, &unstructured.Unstructured{Object: obj}, client.DryRunAll, client.FieldValidation("Strict"))
	if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		t.Fatalf("the API server gave no verdict: %v", err)
	}
	return err
}

// checkVerdicts requires the API server, v1alpha1.Validate and the sidecar to
// agree on the policy object, and returns whether they accept it.
func checkVerdicts(t *testing.T, obj map[string]any, readyPods int32) bool {
	t.Helper()
	local, decoded := policysettest.LocalVerdicts(obj, readyPods)
	server := apiServerVerdict(t, obj)
	spec := obj["spec"]
	if !decoded {
		if server == nil {
			t.Fatalf("the API server accepts %v, which does not decode into the Go types", spec)
		}
		return false
	}
	if (server == nil) != (local.Validate == nil) || (server == nil) != (local.Sidecar == nil) {
		t.Fatalf("verdicts differ for %v:\n  API server:        %v\n  v1alpha1.Validate: %v\n  sidecar:           %v",
			spec, server, local.Validate, local.Sidecar)
	}
	if local.Meaning != "" {
		t.Fatalf("%v: %s", spec, local.Meaning)
	}
	return server == nil
}

// FuzzUpstreamVerdictsAgree: a patch of a valid upstream (the seeds: every
// bound ±1, empty lists, odd hosts, durations at their limits), a stream of
// choices that sets fields to edge values, the ready pods the rate limit is
// shared by, more upstreams (shape) and a podSelector.
func FuzzUpstreamVerdictsAgree(f *testing.F) {
	policysettest.AddSeeds(f)
	f.Fuzz(func(t *testing.T, patch string, choices []byte, readyPods, shape, selector uint8) {
		obj, ok := policysettest.Object(verdictNamespace, patch, choices, shape, selector)
		if !ok {
			t.Skip("the patch is not a JSON object")
		}
		checkVerdicts(t, obj, int32(readyPods))
	})
}

// TestUpstreamVerdictsAgreeOnRandomUpstreams runs 300 upstreams of random
// choices (a fixed seed, so a failure repeats) through the same three verdicts.
func TestUpstreamVerdictsAgreeOnRandomUpstreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2026))
	accepted := 0
	const n = 300
	for range n {
		// Few fields set per upstream, so that some are valid.
		choices := make([]byte, 64)
		for i := range choices {
			if rng.UintN(6) == 0 {
				choices[i] = byte(rng.UintN(256))
			}
		}
		obj, _ := policysettest.Object(verdictNamespace, `{}`, choices, 0, 0)
		if checkVerdicts(t, obj, int32(rng.UintN(5))) {
			accepted++
		}
	}
	// The sample must exercise both verdicts to prove anything.
	if accepted < n/10 || accepted > n*9/10 {
		t.Fatalf("%d of %d random upstreams accepted; want between 10%% and 90%%", accepted, n)
	}
	t.Logf("%d of %d random upstreams accepted by all three", accepted, n)
}
