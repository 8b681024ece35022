package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
)

// replicaCommand, as this program's first argument, makes it one replica of
// the manager's lease endpoint instead of the benchmark (serveReplica).
const replicaCommand = "lease-replica"

// benchNamespace is the namespace of every sidecar's pod behind the lease
// endpoint: the one its token names.
const benchNamespace = "bench"

// storeConns is the most connections a replica keeps to the store, as the
// manager's (internal/quota/storeadmin's pool).
const storeConns = 32

// podToken is the token of the sidecar numbered i in a scenario (its token
// file holds it), and podIdentity the pod the replicas' StaticTokens say it
// was issued to. The pods of a scenario are numbered from 0, those added
// at half time after the others.
func podToken(i int) string { return fmt.Sprintf("bench-token-%d", i) }

func podIdentity(i int) leaseserver.Identity {
	return leaseserver.Identity{Namespace: benchNamespace, Pod: fmt.Sprintf("pod-%d", i), PodUID: fmt.Sprintf("uid-%d", i)}
}

// serveReplica runs one lease endpoint replica until SIGTERM: the real
// handler (leaseserver.New) and listener (leaseserver.Listener, HTTPS with
// the certificate files given), the store's admin credentials in this
// process only, as in the manager. There is no API server: the tokens are a
// StaticTokens table of -pods pods (podToken), the quotas and the namespace
// a StaticQuotas of the SharedQuotas in -quotas (JSON). It serves
// retry_manager_quota_lease_requests_total on -metrics' /metrics.
func serveReplica(args []string) int {
	fs := flag.NewFlagSet(replicaCommand, flag.ExitOnError)
	listen := fs.String("listen", "", "lease endpoint address")
	metrics := fs.String("metrics", "127.0.0.1:0", "metrics address")
	store := fs.String("redis", "", "the store's address")
	quotasFile := fs.String("quotas", "", "JSON list of the SharedQuotas")
	cert, key := fs.String("cert", "", "serving certificate"), fs.String("key", "", "its key")
	pods := fs.Int("pods", 0, "pods with a token")
	ready := fs.String("ready", "", "written once listening")
	_ = fs.Parse(args)
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	ctrllog.SetLogger(log) // the certificate watcher's
	quotas, err := readQuotas(*quotasFile)
	if err != nil {
		log.Error(err, "reading the quotas")
		return 1
	}
	tokens := leaseserver.StaticTokens{}
	for i := range *pods {
		tokens[podToken(i)] = podIdentity(i)
	}
	rs := redisstore.New(redisstore.Options{Address: *store, Username: redisUser, Password: redisPassword,
		KeyPrefix: v1alpha1.QuotaKeys, PoolSize: storeConns})
	stores := leaseserver.StoresFunc(func(context.Context, v1alpha1.RedisStore) (leaseserver.Store, error) { return rs, nil })
	h := leaseserver.New(tokens, quotas, stores, log, nil)
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		log.Error(err, "listening")
		return 1
	}
	mln, err := lc.Listen(context.Background(), "tcp", *metrics)
	if err != nil {
		log.Error(err, "listening")
		return 1
	}
	go func() {
		srv := &http.Server{Handler: promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		_ = srv.Serve(mln)
	}()
	b, _ := json.Marshal(childReady{Metrics: mln.Addr().String()})
	if err := writeAtomically(*ready, b); err != nil {
		log.Error(err, "writing the ready file")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	l := &leaseserver.Listener{Listener: ln, CertFile: *cert, KeyFile: *key, Handler: h, Log: log}
	if err := l.Start(ctx); err != nil {
		log.Error(err, "serving")
		return 1
	}
	return 0
}

// readQuotas reads the SharedQuotas every namespace may draw on.
func readQuotas(path string) (leaseserver.StaticQuotas, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return leaseserver.StaticQuotas{}, err
	}
	var list []v1alpha1.SharedQuota
	if err := json.Unmarshal(b, &list); err != nil {
		return leaseserver.StaticQuotas{}, err
	}
	s := leaseserver.StaticQuotas{Quotas: map[string]*v1alpha1.SharedQuota{},
		Namespaces: map[string]map[string]string{benchNamespace: policyset.StandaloneNamespaceLabels(benchNamespace)}}
	for i := range list {
		s.Quotas[list[i].Name] = &list[i]
	}
	return s, nil
}

// writeAtomically writes path whole or not at all: the benchmark polls it.
func writeAtomically(path string, b []byte) error {
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
