package retrypolicy

import (
	"sync"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Registry keeps the Limits of each upstream, keyed by Config.Name, for the life
// of the process. After compiling a new Set on a config reload, call Adopt: every
// policy of the new set then shares the state its upstream already had. The
// zero value is an empty registry; it is safe for concurrent use and must not
// be copied after first use.
type Registry struct {
	mu sync.Mutex
	m  map[string]*limits.State
}

// Adopt is AdoptAt(time.Now(), s).
func (r *Registry) Adopt(s *Set) { r.AdoptAt(time.Now(), s) }

// AdoptAt binds every policy of s to its upstream's long-lived Limits: an
// upstream seen before keeps its budget counts, tokens and in-flight slots, with
// the new limits applied in place; a new upstream keeps the fresh state Compile
// gave it. Upstreams that s no longer has are forgotten (requests still in flight
// keep their own reference and release into it). Call it before publishing s.
func (r *Registry) AdoptAt(now time.Time, s *Set) { r.AdoptPoliciesAt(now, s.policies...) }

// AdoptPoliciesAt is AdoptAt for policies that are not all in one Set:
// policies of the same name share one state, the first one's (the rules of
// one upstream chosen per request by something other than its host, e.g.
// the route rules of one Service, sharing its budget). Give it every policy
// in use: the upstreams it is not given are forgotten.
func (r *Registry) AdoptPoliciesAt(now time.Time, policies ...*Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*limits.State, len(policies))
	for _, p := range policies {
		l := next[p.cfg.Name]
		if l == nil {
			l = r.m[p.cfg.Name]
		}
		if l == nil {
			l = p.limits.Load()
		} else {
			l.Reconfigure(now, p.cfg.limitSettings())
			p.limits.Store(l)
		}
		next[p.cfg.Name] = l
	}
	r.m = next
}

// Get returns the Limits of an upstream name, or nil.
func (r *Registry) Get(name string) *limits.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}
