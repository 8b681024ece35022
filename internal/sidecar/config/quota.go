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
	"github.com/retrydev/retry-operator/internal/quota/leaseclient"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// quotaClients keeps one quota.Client per SharedQuota the configuration in
// force names (docs/quota.md): a reload that keeps a quota keeps its client,
// its send times and slots on hand and its connection; a changed rate, burst
// or onStoreLoss is applied in place, and so are changed credentials of a
// Redis store (it connects again with them); a changed lease endpoint (its CA
// included), store or concurrency bound makes a new client, and so does a
// change of the namespace its pod is filed under. Safe for concurrent use.
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
	redis  *redisstore.Store // nil when leasing from the manager's endpoint
}

func newQuotaClients(log *slog.Logger, m Metrics) *quotaClients {
	host, _ := os.Hostname() // the pod's name in a cluster
	return &quotaClients{pod: host + "/" + strconv.Itoa(os.Getpid()), log: log, metrics: m, m: map[string]*quotaClient{}}
}

// resolve returns the clients of qs, creating (and starting) those that are
// new. namespaces gives the namespace each quota's client is filed under in
// the store (quotaNamespaces); credentialsFile is --quota-credentials-file,
// used by a quota whose store the sidecar reaches itself and whose rendering
// names no file of its own. Errors name the quota and the file, never a
// credential.
func (q *quotaClients) resolve(qs []policyset.Quota, namespaces map[string]string, credentialsFile string) (func(string) limits.Quota, error) {
	if q == nil {
		return func(string) limits.Quota { return nil }, nil
	}
	out := map[string]*quota.Client{}
	for _, pq := range qs {
		c, err := q.client(pq, namespaces[pq.Name], credentialsFile)
		if err != nil {
			return nil, err
		}
		out[pq.Name] = c
	}
	return func(name string) limits.Quota {
		if c, ok := out[name]; ok {
			return c
		}
		return nil
	}, nil
}

// quotaNamespaces maps each SharedQuota the selected policies name to the
// namespace its client is filed under in the store, the unit of fairness
// between a quota's consumers (docs/quota.md#how-a-pod-draws-on-it): the
// namespace of the policies that name it when they all have the same one
// (always so in a cluster, where a sidecar reads its own namespace's
// policies), else "" (a --policy-file naming it from several namespaces).
func quotaNamespaces(selected []policyset.Policy) map[string]string {
	out := map[string]string{}
	for _, p := range selected {
		for _, u := range p.Upstreams {
			if u.QuotaRef == nil {
				continue
			}
			if ns, seen := out[u.QuotaRef.Name]; seen && ns != p.Namespace {
				out[u.QuotaRef.Name] = ""
			} else if !seen {
				out[u.QuotaRef.Name] = p.Namespace
			}
		}
	}
	return out
}

// client is the client of pq: over the manager's lease endpoint when the
// rendering names one (docs/quota.md#trust), else over the Redis store of a
// policy file, with the credentials of its file. Behind the lease endpoint
// the store files the pod under the namespace of its verified identity,
// whatever namespace says.
func (q *quotaClients) client(pq policyset.Quota, namespace, credentialsFile string) (*quota.Client, error) {
	var (
		key   string
		creds policyset.Credentials
		err   error
	)
	switch {
	case pq.Lease != nil:
		key = fmt.Sprintf("lease\x00%s\x00%s\x00%s\x00%s\x00%t\x00%s", pq.Lease.URL, pq.Lease.Address, pq.Lease.CABundle, pq.Lease.TokenFile, pq.Concurrency > 0, namespace)
	case pq.Store != nil:
		if creds, err = readCredentials(pq, credentialsFile); err != nil {
			return nil, err
		}
		key = fmt.Sprintf("redis\x00%s\x00%t\x00%s", pq.Store.Redis.Address, pq.Concurrency > 0, namespace)
	default:
		return nil, fmt.Errorf("SharedQuota %s: the rendering names neither a lease endpoint nor a store", pq.Name)
	}
	spec := pq.Spec()
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur := q.m[pq.Name]; cur != nil {
		if cur.key == key {
			if cur.redis != nil && cur.creds != creds {
				cur.redis.SetCredentials(creds.Username, creds.Password)
				cur.creds = creds
			}
			cur.client.SetSpec(spec)
			return cur.client, nil
		}
		cur.close()
	}
	store, rs, err := newStore(pq, creds)
	if err != nil {
		return nil, fmt.Errorf("SharedQuota %s: %w", pq.Name, err)
	}
	c := quota.New(spec, store, clock.Real{}, quota.Pod{Namespace: namespace, Name: q.pod}, q.log, q.metrics.QuotaObserver())
	q.m[pq.Name] = &quotaClient{key: key, creds: creds, client: c, redis: rs}
	q.metrics.WatchQuota(c)
	_ = c.Start() // a store lost at start is reported by the client's state
	return c, nil
}

// newStore is the store of pq: the lease endpoint's, or a Redis (returned
// twice: as the store, and to be given new credentials and closed).
func newStore(pq policyset.Quota, creds policyset.Credentials) (quota.Store, *redisstore.Store, error) {
	if l := pq.Lease; l != nil {
		s, err := leaseclient.New(leaseclient.Options{URL: l.URL, Address: l.Address, CABundle: []byte(l.CABundle), TokenFile: l.TokenFile})
		return s, nil, err
	}
	rs := redisstore.New(redisstore.Options{Address: pq.Store.Redis.Address, Username: creds.Username,
		Password: creds.Password, KeyPrefix: v1alpha1.QuotaKeys})
	return rs, rs, nil
}

// readCredentials reads the credentials of a quota whose store the sidecar
// reaches itself: the file its rendering names, else credentialsFile, else
// none.
func readCredentials(pq policyset.Quota, credentialsFile string) (policyset.Credentials, error) {
	file := pq.Store.Redis.CredentialsFile
	if file == "" {
		file = credentialsFile
	}
	if file == "" {
		return policyset.Credentials{}, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return policyset.Credentials{}, fmt.Errorf("SharedQuota %s: credentials: %w", pq.Name, err)
	}
	creds, err := policyset.ParseCredentials(data)
	if err != nil {
		return policyset.Credentials{}, fmt.Errorf("SharedQuota %s: credentials file %s: %w", pq.Name, file, err)
	}
	return creds, nil
}

func (c *quotaClient) close() {
	c.client.Close()
	if c.redis != nil {
		c.redis.Close()
	}
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
			c.close()
			q.metrics.UnwatchQuota(c.client)
			delete(q.m, name)
		}
	}
}
