// Package redisstore is the quota.Store of the sidecar: one Redis server,
// one atomic script per lease operation, run on the server's clock so the
// pods' clocks do not matter (docs/quota.md).
package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retrydev/retry-operator/internal/quota"
)

//go:embed lease.lua
var leaseSource string

//go:embed forget.lua
var forgetSource string

// lease and forget are loaded once per server and run by their SHA1
// (EVALSHA); a server that lost them (restarted, SCRIPT FLUSH) answers
// NOSCRIPT and the script is sent again (EVAL), which loads it back.
var (
	lease  = redis.NewScript(leaseSource)
	forget = redis.NewScript(forgetSource)
)

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
	// KeyPrefix names a quota's keys: KeyPrefix(name) + "tat", "members",
	// "hold".
	KeyPrefix func(name string) string
	// PoolSize is the most connections kept open; 0 is 4, a sidecar's. The
	// manager's lease endpoint leases for the whole fleet through one Store.
	PoolSize int
}

// Store is a Redis server holding the state of any number of quotas: the
// arithmetic of quota.Model, run by one atomic script per lease operation on
// the server's clock. Forget drops a namespace's pods from a quota (the
// manager calls it when a namespace is revoked). Safe for concurrent use.
type Store struct {
	opts Options
	rdb  atomic.Pointer[redis.Client]
	// now, set by the tests only, replaces the server's clock in the
	// script, so the shared table runs the same leases on the Model and
	// here.
	now func() time.Time
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
		PoolSize:           cmp.Or(o.PoolSize, 4),
		DisableIdentity:    true, // no CLIENT SETINFO: the ACL user need not be allowed it
		Protocol:           2,
	})
}

// SetCredentials makes the lease operations from now on authenticate as
// username with password, on new connections (a password rotated in the
// sidecar's credentials file or the manager's admin Secret,
// docs/quota.md#without-a-cluster). The old connections are closed
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
	var hold int64
	if !r.Hold.IsZero() {
		hold = r.Hold.UnixMilli()
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	us := func(d time.Duration) int64 { return d.Microseconds() }
	res, err := lease.Run(ctx, s.rdb.Load(), s.keys(spec.Name),
		r.Pod, r.Namespace, spec.RequestsPerSecond, spec.Burst, spec.Concurrency, r.Want, r.Due,
		strconv.FormatFloat(r.Demand, 'f', 3, 64), r.Slots, r.InUse, hold,
		us(quota.LeaseTTL), us(quota.Drawing), us(quota.Lead), us(quota.CatchUp), us(quota.MaxAhead),
		us(quota.PastLife), us(quota.MinLateness), quota.MaxDemand, now).Slice()
	if err != nil {
		return quota.LeaseReply{}, classify(err)
	}
	return parse(res)
}

// Forget drops the record of every pod of namespace from spec's quota (the
// namespace was revoked): its share of the rate and its slots go to the
// others with their next lease. Send times already granted stay granted.
func (s *Store) Forget(ctx context.Context, spec quota.Spec, namespace string) error {
	return classify(forget.Run(ctx, s.rdb.Load(), s.keys(spec.Name)[1:2], namespace).Err())
}

// Pods lists the pods the store records for spec's quota, sorted: those a
// lease operation counts, and any not seen for quota.LeaseTTL that no lease
// has dropped yet. It only reads (for tests and diagnosis: the key layout
// stays here).
func (s *Store) Pods(ctx context.Context, spec quota.Spec) ([]string, error) {
	pods, err := s.rdb.Load().HKeys(ctx, s.keys(spec.Name)[1]).Result()
	if err != nil {
		return nil, classify(err)
	}
	slices.Sort(pods)
	return pods, nil
}

func (s *Store) keys(name string) []string {
	p := s.opts.KeyPrefix(name)
	return []string{p + "tat", p + "members", p + "hold"}
}

// classify marks the errors that retrying does not mend: a wrong password, no
// password, or an ACL user without the keys or commands of the quota.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if code, ok := quota.RefusalCode(err); ok {
		return fmt.Errorf("%w: %s", quota.ErrRefused, code)
	}
	return err
}

// parse reads the script's answer: granted, first, spacing, lateness, rate,
// slots, fleet demand, pods, hold (integers, and numbers written as strings
// where Lua would truncate them).
func parse(res []any) (quota.LeaseReply, error) {
	if len(res) != 9 {
		return quota.LeaseReply{}, fmt.Errorf("redisstore: lease script answered %d values, want 9", len(res))
	}
	var ints [9]int64
	var floats [9]float64
	for i, v := range res {
		switch v := v.(type) {
		case int64:
			ints[i] = v
		case string:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return quota.LeaseReply{}, fmt.Errorf("redisstore: lease script value %d is not a number", i)
			}
			floats[i] = f
		default:
			return quota.LeaseReply{}, fmt.Errorf("redisstore: lease script value %d is %T, want a number", i, v)
		}
	}
	r := quota.LeaseReply{Granted: ints[0], Rate: floats[4], Slots: ints[5], FleetDemand: floats[6], Pods: int(ints[7])}
	if r.Granted > 0 {
		r.First, r.Spacing, r.Lateness = quota.SendTimes(floats[1], floats[2], floats[3])
	}
	if ints[8] > 0 {
		r.Hold = time.UnixMilli(ints[8])
	}
	return r, nil
}
