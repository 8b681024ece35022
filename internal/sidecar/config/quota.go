package config

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
)

// quotaClients keeps one quota.Client per SharedQuota the configuration in
// force names (docs/quota.md): a reload that keeps a quota keeps its client,
// its tokens and slots on hand and its connection; a changed rate, burst or
// onStoreLoss is applied in place, and so are changed credentials (the store
// connects again with them); a changed store or concurrency bound makes a
// new client. Safe for concurrent use.
type quotaClients struct {
	pod     string
	log     *slog.Logger
	metrics Metrics

	mu sync.Mutex
	m  map[string]*quotaClient
}

type quotaClient struct {
	key    string // what a new client is needed for
	creds  policyset.Credentials
	client *quota.Client
	store  *redisstore.Store
}

func newQuotaClients(log *slog.Logger, m Metrics) *quotaClients {
	host, _ := os.Hostname() // the pod's name in a cluster
	return &quotaClients{pod: host + "/" + strconv.Itoa(os.Getpid()), log: log, metrics: m, m: map[string]*quotaClient{}}
}

// resolve returns the clients of qs, creating (and starting) those that are
// new. credentialsFile is --quota-credentials-file, used by a quota whose
// rendering names no file of its own. Errors name the quota and the file,
// never a credential.
func (q *quotaClients) resolve(qs []policyset.Quota, credentialsFile string) (func(string) retrypolicy.Quota, error) {
	if q == nil {
		return func(string) retrypolicy.Quota { return nil }, nil
	}
	out := map[string]*quota.Client{}
	for _, pq := range qs {
		c, err := q.client(pq, credentialsFile)
		if err != nil {
			return nil, err
		}
		out[pq.Name] = c
	}
	return func(name string) retrypolicy.Quota {
		if c, ok := out[name]; ok {
			return c
		}
		return nil
	}, nil
}

func (q *quotaClients) client(pq policyset.Quota, credentialsFile string) (*quota.Client, error) {
	file := pq.Store.Redis.CredentialsFile
	if file == "" {
		file = credentialsFile
	}
	var creds policyset.Credentials
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("SharedQuota %s: credentials: %w", pq.Name, err)
		}
		if creds, err = policyset.ParseCredentials(data); err != nil {
			return nil, fmt.Errorf("SharedQuota %s: credentials file %s: %w", pq.Name, file, err)
		}
	}
	spec := pq.Spec()
	key := fmt.Sprintf("%s\x00%t", pq.Store.Redis.Address, pq.Concurrency > 0)
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur := q.m[pq.Name]; cur != nil {
		if cur.key == key {
			if cur.creds != creds {
				cur.store.SetCredentials(creds.Username, creds.Password)
				cur.creds = creds
			}
			cur.client.SetSpec(spec)
			return cur.client, nil
		}
		cur.client.Close()
		cur.store.Close()
	}
	store := redisstore.New(redisstore.Options{Address: pq.Store.Redis.Address, Username: creds.Username,
		Password: creds.Password, KeyPrefix: v1alpha1.QuotaKeys})
	c := quota.New(spec, store, clock.Real{}, q.pod, q.log, q.metrics.QuotaObserver())
	q.m[pq.Name] = &quotaClient{key: key, creds: creds, client: c, store: store}
	q.metrics.WatchQuota(c)
	_ = c.Start() // a store lost at start is reported by the client's state
	return c, nil
}

// retain closes the clients of quotas that names does not list (after a
// configuration without them was put in force).
func (q *quotaClients) retain(names []string) {
	if q == nil {
		return
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for name, c := range q.m {
		if !keep[name] {
			c.client.Close()
			c.store.Close()
			q.metrics.UnwatchQuota(c.client)
			delete(q.m, name)
		}
	}
}
