package storeadmin

import (
	"context"
	"sync"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
)

// CredentialsReread is how often the pool reads a store's admin Secret again,
// so a rotated admin password reaches the lease endpoint without a restart.
const CredentialsReread = 30 * time.Second

// poolConns is the most connections the manager keeps to one store: its lease
// endpoint leases for every sidecar of the fleet through them.
const poolConns = 32

// Pool keeps one lease store per quota store (address and admin Secret),
// connected with the admin credentials: the manager's lease endpoint leases
// through it (docs/quota.md#trust). The number of stores is the number the
// SharedQuotas name, which the platform team writes. Safe for concurrent use;
// the zero value needs Admin.
type Pool struct {
	Admin Admin

	mu     sync.Mutex
	stores map[poolKey]*pooled
}

type poolKey struct{ address, secret string }

type pooled struct {
	mu         sync.Mutex
	store      *redisstore.Store
	user, pass string
	readAt     time.Time
	reading    bool
}

// Store returns the lease store of s. Its credentials are read on the first
// call (an error then is the Secret's: a *Problem as for Ping), and again in
// the background every CredentialsReread, the store in use meanwhile.
func (p *Pool) Store(ctx context.Context, s v1alpha1.RedisStore) (*redisstore.Store, error) {
	key := poolKey{address: s.Address}
	if s.CredentialsSecretRef != nil {
		key.secret = s.CredentialsSecretRef.Name
	}
	p.mu.Lock()
	if p.stores == nil {
		p.stores = map[poolKey]*pooled{}
	}
	e := p.stores[key]
	if e == nil {
		e = &pooled{}
		p.stores[key] = e
	}
	p.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.store == nil {
		if err := p.read(ctx, s, e); err != nil {
			return nil, err
		}
		return e.store, nil
	}
	if time.Since(e.readAt) >= CredentialsReread && !e.reading {
		e.reading = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			e.mu.Lock()
			defer e.mu.Unlock()
			_ = p.read(ctx, s, e) // on failure the credentials in use stay
			e.reading = false
		}()
	}
	return e.store, nil
}

// read reads the credentials of s into e, under e.mu, creating its store or
// giving it the new credentials.
func (p *Pool) read(ctx context.Context, s v1alpha1.RedisStore, e *pooled) error {
	user, pass, err := p.Admin.credentials(ctx, s)
	if err != nil {
		return err
	}
	switch {
	case e.store == nil:
		e.store = redisstore.New(redisstore.Options{Address: s.Address, Username: user, Password: pass,
			KeyPrefix: v1alpha1.QuotaKeys, PoolSize: poolConns})
	case user != e.user || pass != e.pass:
		e.store.SetCredentials(user, pass)
	}
	e.user, e.pass, e.readAt = user, pass, time.Now()
	return nil
}
