package retrypolicy

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/internal/rules"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Jitter selects how the local backoff is randomised (R2). With
// c = min(max, base·2^i) and a random number u in [0, 1]:
//
//	Full:  u·c              uniform [0, c]
//	Equal: c/2 + u·c/2      uniform [c/2, c]
//	None:  c
type Jitter string

// The jitter modes.
const (
	JitterFull  Jitter = "Full"
	JitterEqual Jitter = "Equal"
	JitterNone  Jitter = "None"
)

// Backoff is the local exponential wait between attempts, used when the server
// gives no (valid) Retry-After, and as a floor when it does.
type Backoff struct {
	Base, Max time.Duration
	Jitter    Jitter
}

// Config is the plain-Go form of one upstream of a RetryPolicy, with defaults
// already applied by the caller (the API package converts to it). Compile
// validates it. Field paths in errors use the API's JSON names
// (maxAttempts, backoff.max, ...) so a caller can prefix "spec.upstreams[i].".
type Config struct {
	// Name identifies the upstream in logs and metrics and is the key of its
	// long-lived runtime state in a Registry: it must be unique within a Set. The
	// sidecar may qualify it ("namespace/policy/upstream") when names can collide.
	Name string
	// Hosts are matched against the request authority: "host" (any port),
	// "host:port" (that port only) or "*.suffix" (any subdomain, not suffix itself),
	// lower case.
	Hosts []string
	// MaxAttempts counts transmissions including the first (4 = 3 retries), 1..10.
	MaxAttempts int
	// Deadline bounds one logical request: every attempt up to its response headers
	// and every wait.
	Deadline time.Duration
	// PerTryTimeout bounds one attempt up to its response headers; 0 = none.
	PerTryTimeout time.Duration
	// ConnectTimeout bounds the dial (and TLS handshake) of an attempt on a new
	// connection; 0 means 5 s, or Deadline if shorter.
	ConnectTimeout time.Duration
	Backoff        Backoff
	// RetryOnStatus is a subset of 408, 425, 429, 500, 502, 503, 504.
	RetryOnStatus []int
	// RetryOnGRPCStatus are the grpc-status codes retried, 1..MaxGRPCStatus
	// (UNAVAILABLE is 14; OK, 0, never), for gRPC calls whose method
	// ReplayableMethods lists (docs/grpc.md). grpc-go's codes.Code values
	// convert: uint32(codes.Unavailable).
	RetryOnGRPCStatus []uint32
	// RetryOn is the set of failures without a response that are retried, e.g.
	// RetryConnectFailure (the API's retryOn booleans, one bit each).
	RetryOn Condition
	// ReplayableMethods are upper-case method tokens; POST and PATCH are refused
	// (they are replayable only through IdempotencyKeyHeader). Entries that
	// start with '/' are gRPC method patterns, "/package.Service/Method" or
	// "/package.Service/*" (GRPCMethodReplayable).
	ReplayableMethods []string
	// IdempotencyKeyHeader makes a request that carries it replayable whatever its
	// method; "" = none.
	IdempotencyKeyHeader string
	// MaxReplayBodyBytes is the largest request body buffered for replay; larger
	// bodies are streamed once and never replayed. 0 = never buffer.
	MaxReplayBodyBytes int64
	// RetryAfterMaxWait is the longest server-requested wait honoured
	// automatically; a longer hint is deferred to the caller.
	RetryAfterMaxWait time.Duration
	// RetryAfterSpread bounds the non-negative jitter added after a server hint.
	RetryAfterSpread time.Duration
	// The limits of the upstream (R6, R7), each nil for none: the outage
	// budget, the start rate per pod and the attempts in flight with their
	// queue. Their runtime state is the Policy's limits.State.
	Budget      *limits.BudgetConfig
	RateLimit   *limits.RateLimitConfig
	Concurrency *limits.ConcurrencyConfig
	// Pacing holds the upstream when it says it has no capacity (docs/pacing.md);
	// the zero value is off.
	Pacing limits.PacingConfig
	// Quota is the fleet-wide quota every attempt draws on (docs/quota.md),
	// nil for none. It is a runtime object the caller builds (the sidecar's
	// store client), shared by every upstream that names the same quota.
	Quota limits.Quota
}

// FieldError is one validation failure: the field path (API JSON names) and what
// is allowed, e.g. "backoff.max: must be >= backoff.base (2s)".
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// defaultConnectTimeout bounds a dial when the policy sets no connectTimeout
// (and the deadline is not shorter).
const defaultConnectTimeout = 5 * time.Second

// minReserve is the time kept free after a wait for the next attempt when the
// policy has no perTryTimeout (R3): a retry that could not even start a useful
// attempt before the deadline is not made.
const minReserve = 100 * time.Millisecond

// Policy is an immutable, validated upstream policy: build it with Compile and
// share it freely between goroutines. Its runtime state (budget, rate limiter,
// concurrency gate) lives in a Limits that a Registry can swap in so the state of
// an upstream survives configuration reloads.
type Policy struct {
	cfg        Config
	statusMask uint8
	grpcMask   uint32   // bit n: grpc-status n is retried
	methods    []string // upper-case, from ReplayableMethods
	// grpcMethods are ReplayableMethods' gRPC patterns, "/s.S/M" or "/s.S/*".
	grpcMethods []string
	idemKey     string // canonical header key, "" = none
	reserve     time.Duration
	connect     time.Duration // effective connect timeout
	limits      atomic.Pointer[limits.State]
}

// Compile validates c and returns the compiled policy, or an error that joins one
// *FieldError per problem. The Config's slices are copied, so the caller may reuse
// them.
func Compile(c Config) (*Policy, error) {
	var v configErrors
	v.identity(c)
	v.timing(c)
	mask, methods, idem := v.replay(c)
	grpcMask := v.grpcStatus(c)
	v.limits(c)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	p := &Policy{cfg: c, statusMask: mask, grpcMask: grpcMask, idemKey: idem, reserve: minReserve}
	for _, m := range methods {
		if rules.IsGRPCMethodPattern(m) {
			p.grpcMethods = append(p.grpcMethods, m)
		} else {
			p.methods = append(p.methods, m)
		}
	}
	p.cfg.Hosts = append([]string(nil), c.Hosts...)
	p.cfg.RetryOnStatus = append([]int(nil), c.RetryOnStatus...)
	p.cfg.RetryOnGRPCStatus = append([]uint32(nil), c.RetryOnGRPCStatus...)
	p.cfg.ReplayableMethods = append([]string(nil), c.ReplayableMethods...)
	if c.Budget != nil {
		b := *c.Budget
		p.cfg.Budget = &b
	}
	if c.RateLimit != nil {
		r := *c.RateLimit
		p.cfg.RateLimit = &r
	}
	if c.Concurrency != nil {
		q := *c.Concurrency
		p.cfg.Concurrency = &q
	}
	if c.PerTryTimeout > 0 {
		p.reserve = c.PerTryTimeout
	}
	p.connect = c.ConnectTimeout
	if p.connect == 0 {
		p.connect = min(defaultConnectTimeout, c.Deadline)
	}
	p.limits.Store(limits.New(p.cfg.limitSettings()))
	return p, nil
}

// configErrors collects Compile's *FieldErrors, in field order.
type configErrors struct{ errs []error }

func (v *configErrors) bad(field, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// check records problem (from a checker of internal/rules) with the value it was
// about; a relation between two fields (got == nil) names the other in problem.
func (v *configErrors) check(field, problem string, got any) {
	switch {
	case problem == "":
	case got == nil:
		v.bad(field, "%s", problem)
	default:
		v.bad(field, "%s (got %v)", problem, got)
	}
}

// identity: the name and the hosts.
func (v *configErrors) identity(c Config) {
	if c.Name == "" {
		v.bad("name", "must not be empty")
	}
	switch {
	case len(c.Hosts) == 0:
		v.bad("hosts", `must list at least one "host", "host:port" or "*.suffix"`)
	case len(c.Hosts) > rules.MaxHosts:
		v.bad("hosts", "must have at most %d entries (got %d)", rules.MaxHosts, len(c.Hosts))
	}
	for i, h := range c.Hosts {
		if err := rules.HostPatternProblem(h); err != "" {
			v.bad(fmt.Sprintf("hosts[%d]", i), `%s: must be "host", "host:port" or "*.suffix" in lower case (%q)`, err, h)
		} else if j := indexOf(c.Hosts[:i], h); j >= 0 {
			v.bad(fmt.Sprintf("hosts[%d]", i), "duplicate of hosts[%d] (%q)", j, h)
		}
	}
}

// timing: attempts, deadline, timeouts and backoff.
func (v *configErrors) timing(c Config) {
	v.check("maxAttempts", rules.AttemptsProblem(c.MaxAttempts), c.MaxAttempts)
	if c.Deadline <= 0 {
		v.bad("deadline", "must be > 0 (got %s)", c.Deadline)
	}
	if c.ConnectTimeout < 0 {
		v.bad("connectTimeout", "must be >= 0, 0 = the default %s (got %s)", defaultConnectTimeout, c.ConnectTimeout)
	} else if c.ConnectTimeout > 0 && c.Deadline > 0 {
		v.check("connectTimeout", rules.ConnectTimeoutProblem(c.ConnectTimeout, c.Deadline), nil)
	}
	if c.PerTryTimeout < 0 {
		v.bad("perTryTimeout", "must be >= 0, 0 = none (got %s)", c.PerTryTimeout)
	} else if c.PerTryTimeout > 0 && c.Deadline > 0 {
		v.check("perTryTimeout", rules.PerTryTimeoutProblem(c.PerTryTimeout, c.Deadline), nil)
	}
	if c.Backoff.Base <= 0 {
		v.bad("backoff.base", "must be > 0 (got %s)", c.Backoff.Base)
	} else {
		v.check("backoff.max", rules.BackoffMaxProblem(c.Backoff.Base, c.Backoff.Max), nil)
	}
	v.check("backoff.jitter", rules.JitterProblem(string(c.Backoff.Jitter)), strconv.Quote(string(c.Backoff.Jitter)))
}

// replay: what is retried and what may be replayed. It returns the status
// mask, the replayable methods and the canonical idempotency key header.
func (v *configErrors) replay(c Config) (mask uint8, methods []string, idem string) {
	for i, s := range c.RetryOnStatus {
		field := fmt.Sprintf("retryOn.statusCodes[%d]", i)
		v.check(field, rules.StatusProblem(s), s)
		if j := indexOf(c.RetryOnStatus[:i], s); j >= 0 {
			v.bad(field, "duplicate of retryOn.statusCodes[%d] (%d)", j, s)
		}
		mask |= statusBit(s)
	}
	if len(c.ReplayableMethods) > rules.MaxReplayableMethods {
		v.bad("replayableMethods", "must have at most %d entries (got %d)", rules.MaxReplayableMethods, len(c.ReplayableMethods))
	}
	methods = make([]string, 0, len(c.ReplayableMethods))
	for i, m := range c.ReplayableMethods {
		field := fmt.Sprintf("replayableMethods[%d]", i)
		if problem, _ := rules.MethodProblem(m); problem != "" {
			v.check(field, problem, strconv.Quote(m))
			continue
		}
		if j := indexOf(c.ReplayableMethods[:i], m); j >= 0 {
			v.bad(field, "duplicate of replayableMethods[%d] (%q)", j, m)
			continue
		}
		methods = append(methods, m)
	}
	if h := c.IdempotencyKeyHeader; h != "" {
		if problem := rules.HeaderNameProblem(h); problem != "" {
			v.check("idempotencyKey.header", problem, strconv.Quote(h))
		} else {
			idem = textproto.CanonicalMIMEHeaderKey(h)
		}
	}
	v.checkRange(rules.MaxReplayBodyBytesRange, c.MaxReplayBodyBytes)
	return mask, methods, idem
}

// grpcStatus: the gRPC statuses retried, as a mask with bit n for code n.
func (v *configErrors) grpcStatus(c Config) (mask uint32) {
	for i, code := range c.RetryOnGRPCStatus {
		field := fmt.Sprintf("retryOn.grpcStatusCodes[%d]", i)
		switch {
		case code < 1 || code > MaxGRPCStatus:
			v.bad(field, "must be a gRPC status code from 1 (CANCELLED) to %d (UNAUTHENTICATED); 0, OK, is never retried (got %d)", MaxGRPCStatus, code)
		case mask&(1<<code) != 0:
			v.bad(field, "duplicate of retryOn.grpcStatusCodes[%d] (%d)", indexOf(c.RetryOnGRPCStatus, code), code)
		default:
			mask |= 1 << code
		}
	}
	return mask
}

// limits: Retry-After, budget, rate limit and concurrency.
func (v *configErrors) limits(c Config) {
	if c.RetryAfterMaxWait < 0 {
		v.bad("retryAfter.maxWait", "must be >= 0 (got %s)", c.RetryAfterMaxWait)
	}
	if c.RetryAfterSpread < 0 {
		v.bad("retryAfter.spread", "must be >= 0 (got %s)", c.RetryAfterSpread)
	}
	if b := c.Budget; b != nil {
		v.checkRange(rules.RetryPercentRange, int64(b.RetryPercent))
		v.checkRange(rules.MinRetriesPerSecondRange, int64(b.MinRetriesPerSecond))
	}
	if r := c.RateLimit; r != nil {
		// The per-pod share of the fleet's quota: positive, and never more than
		// the largest quota.
		maxPerSecond := float64(rules.RequestsPerMinuteRange.Max) / 60
		if !(r.RequestsPerSecond > 0) || !(r.RequestsPerSecond <= maxPerSecond) {
			v.bad("rateLimit.requestsPerSecond", "must be > 0 and <= %v (rateLimit.requestsPerMinute %d..%d) (got %v)",
				maxPerSecond, rules.RequestsPerMinuteRange.Min, rules.RequestsPerMinuteRange.Max, r.RequestsPerSecond)
		}
		v.checkRange(rules.BurstRange, int64(r.Burst))
	}
	if q := c.Concurrency; q != nil {
		v.checkRange(rules.MaxInFlightRange, int64(q.MaxInFlight))
		v.checkRange(rules.MaxQueuedRange, int64(q.MaxQueued))
		if q.QueueTimeout < 0 {
			v.bad("concurrency.queueTimeout", "must be >= 0 (got %s)", q.QueueTimeout)
		}
	}
	if c.Pacing.HoldOnDeferral {
		v.check("pacing.holdOnDeferral", rules.HoldOnDeferralProblem(c.MaxAttempts, len(c.RetryOnStatus)), nil)
	}
}

// checkRange records a value outside r.
func (v *configErrors) checkRange(r rules.Range, got int64) { v.check(r.Path, r.Problem(got), got) }

// indexOf is the index of the first x in s, or -1.
func indexOf[T comparable](s []T, x T) int {
	for i, y := range s {
		if y == x {
			return i
		}
	}
	return -1
}

// statusBit maps a retryable status to its bit in Policy.statusMask; 0 if none.
func statusBit(code int) uint8 {
	if i := rules.StatusIndex(code); i >= 0 {
		return 1 << i
	}
	return 0
}

// Name is the upstream name (Config.Name).
func (p *Policy) Name() string { return p.cfg.Name }

// Config returns a copy of the configuration the policy was compiled from.
func (p *Policy) Config() Config {
	c := p.cfg
	c.Hosts = append([]string(nil), p.cfg.Hosts...)
	c.RetryOnStatus = append([]int(nil), p.cfg.RetryOnStatus...)
	c.RetryOnGRPCStatus = append([]uint32(nil), p.cfg.RetryOnGRPCStatus...)
	c.ReplayableMethods = append([]string(nil), p.cfg.ReplayableMethods...)
	return c
}

// Limits is the runtime state the policy currently uses (its own, or the one a
// Registry bound to it), for a retrying executor.
func (p *Policy) Limits() *limits.State { return p.limits.Load() }

// limitSettings are the parts of c that the runtime state applies.
func (c *Config) limitSettings() limits.Config {
	return limits.Config{Budget: c.Budget, RateLimit: c.RateLimit, Concurrency: c.Concurrency, Pacing: c.Pacing,
		Quota: c.Quota}
}

// RetriesStatus reports whether the policy retries responses with this status.
func (p *Policy) RetriesStatus(code int) bool { return p.statusMask&statusBit(code) != 0 }

// MethodReplayable reports whether requests with this method may be sent again
// by method alone (no idempotency key needed).
func (p *Policy) MethodReplayable(method string) bool {
	for _, m := range p.methods {
		if m == method {
			return true
		}
	}
	return false
}

// IdempotencyKeyHeader is the canonical header name whose presence makes a
// request replayable, or "".
func (p *Policy) IdempotencyKeyHeader() string { return p.idemKey }

// The accessors below read single fields of the compiled policy without the
// copies Config makes, for an executor (package retryhttp's Transport) that
// consults them on every request.

// MaxAttempts is Config.MaxAttempts: transmissions including the first.
func (p *Policy) MaxAttempts() int { return p.cfg.MaxAttempts }

// Deadline is Config.Deadline: the bound of one logical request.
func (p *Policy) Deadline() time.Duration { return p.cfg.Deadline }

// PerTryTimeout is Config.PerTryTimeout: the bound of one attempt up to its
// response headers, 0 for none.
func (p *Policy) PerTryTimeout() time.Duration { return p.cfg.PerTryTimeout }

// ConnectTimeout is the effective bound of a dial and TLS handshake:
// Config.ConnectTimeout, or if that is 0 the shorter of 5 s
// and Deadline.
func (p *Policy) ConnectTimeout() time.Duration { return p.connect }

// Reserve is the time an attempt needs left before the deadline to be worth
// starting: PerTryTimeout, or 100 ms if the policy has none. A wait (for a
// retry, admission or a hold) that would leave less is not made (R3).
func (p *Policy) Reserve() time.Duration { return p.reserve }

// Backoff is Config.Backoff.
func (p *Policy) Backoff() Backoff { return p.cfg.Backoff }

// Retries reports whether Config.RetryOn holds every condition of c.
func (p *Policy) Retries(c Condition) bool { return c != 0 && p.cfg.RetryOn&c == c }

// MaxReplayBodyBytes is Config.MaxReplayBodyBytes: the largest request body
// buffered for replay, 0 for none.
func (p *Policy) MaxReplayBodyBytes() int64 { return p.cfg.MaxReplayBodyBytes }

// Pacing is Config.Pacing.
func (p *Policy) Pacing() limits.PacingConfig { return p.cfg.Pacing }
