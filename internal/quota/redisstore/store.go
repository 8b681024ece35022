// Package redisstore is the quota.Store of the sidecar: one Redis server,
// one atomic script per lease operation, run on the server's clock so the
// pods' clocks do not matter (docs/quota.md).
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retrydev/retry-operator/internal/quota"
)

//go:embed lease.lua
var leaseSource string

// lease is loaded once per server and run by its SHA1 (EVALSHA); a server
// that lost it (restarted, SCRIPT FLUSH) answers NOSCRIPT and the script is
// sent again (EVAL), which loads it back.
var lease = redis.NewScript(leaseSource)

// go-redis logs its dial failures itself; the quota client reports the
// store's state once per change instead (docs/quota.md#when-the-store-is-lost), so the
// library's own lines are dropped.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Options are how the store is reached.
type Options struct {
	Address            string
	Username, Password string
	// KeyPrefix names a quota's keys: KeyPrefix(name) + "bucket", "pods",
	// "hold", "credits".
	KeyPrefix func(name string) string
}

// Store is a Redis server holding the state of any number of quotas. Safe
// for concurrent use.
type Store struct {
	opts Options
	rdb  atomic.Pointer[redis.Client]
}

// New returns a store over a small pool to o.Address. Nothing is dialled
// until the first lease operation.
func New(o Options) *Store {
	s := &Store{opts: o}
	s.rdb.Store(newClient(o))
	return s
}

func newClient(o Options) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: o.Address, Username: o.Username, Password: o.Password,
		DialTimeout: quota.StoreTimeout, ReadTimeout: quota.StoreTimeout, WriteTimeout: quota.StoreTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // the next lease operation is the retry
		// One dial per operation, for the same reason: go-redis dials up to
		// 5 times 100 ms apart, so with the store gone every lease ran into
		// StoreTimeout (250 ms) rather than failing at once, and attempts
		// waiting for it waited an interval more for onStoreLoss to take
		// over (docs/performance.md#shared-quota).
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		PoolSize:           4,
		DisableIdentity:    true, // no CLIENT SETINFO: the ACL user need not be allowed it
		Protocol:           2,
	})
}

// SetCredentials makes the lease operations from now on authenticate as
// username with password, on new connections (a password rotated in the
// mounted Secret, docs/quota.md#credentials). The old connections are closed
// once a lease operation begun on them has had its time.
func (s *Store) SetCredentials(username, password string) {
	o := s.opts
	o.Username, o.Password = username, password
	old := s.rdb.Swap(newClient(o))
	time.AfterFunc(quota.StoreTimeout, func() { _ = old.Close() })
}

// Close closes the connections.
func (s *Store) Close() error { return s.rdb.Load().Close() }

// Lease implements quota.Store.
func (s *Store) Lease(ctx context.Context, spec quota.Spec, r quota.LeaseRequest) (quota.LeaseReply, error) {
	p := s.opts.KeyPrefix(spec.Name)
	var hold int64
	if !r.Hold.IsZero() {
		hold = r.Hold.UnixMilli()
	}
	res, err := lease.Run(ctx, s.rdb.Load(), []string{p + "bucket", p + "pods", p + "hold", p + "credits"},
		r.Pod, spec.RequestsPerSecond, spec.Burst, spec.Concurrency, r.Want, r.Held,
		strconv.FormatFloat(r.Demand, 'f', 3, 64), r.Slots, r.InUse, hold, quota.LeaseTTL.Milliseconds(), r.Returned,
		quota.IdleInterval.Milliseconds()).Slice()
	if err != nil {
		return quota.LeaseReply{}, classify(err)
	}
	return parse(res)
}

// classify marks the errors that retrying does not mend: a wrong password, no
// password, or an ACL user without the keys or commands of the quota (the
// rules the manager gives it are quotastore.UserRules).
func classify(err error) error {
	if code, ok := quota.RefusalCode(err); ok {
		return fmt.Errorf("%w: %s", quota.ErrRefused, code)
	}
	return err
}

func parse(res []any) (quota.LeaseReply, error) {
	if len(res) != 6 {
		return quota.LeaseReply{}, fmt.Errorf("redisstore: lease script answered %d values, want 6", len(res))
	}
	ints := [6]int64{}
	for _, i := range []int{0, 1, 3, 4, 5} {
		n, ok := res[i].(int64)
		if !ok {
			return quota.LeaseReply{}, fmt.Errorf("redisstore: lease script value %d is %T, want an integer", i, res[i])
		}
		ints[i] = n
	}
	s, _ := res[2].(string)
	fleet, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return quota.LeaseReply{}, errors.New("redisstore: lease script answered a fleet demand that is not a number")
	}
	r := quota.LeaseReply{Granted: ints[0], Slots: ints[1], FleetDemand: fleet, Pods: int(ints[3])}
	if ints[4] > 0 {
		r.Hold = time.UnixMilli(ints[4])
	}
	return r, nil
}
