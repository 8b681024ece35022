// Package leaseserver is the manager's lease endpoint (docs/quota.md#trust):
// sidecars lease send times and concurrency slots of a SharedQuota from it,
// as Envoy's sidecars ask the global rate limit service, and only the
// manager holds the store's credentials. A request names the quota in its
// path and carries a quota.LeaseRequest as JSON and the pod's projected
// service-account token; the answer is a quota.LeaseReply (durations in
// nanoseconds). For a quota of 100/s with burst 50:
//
//	POST /v1/quotas/partner-payments/lease
//	Authorization: Bearer <token, audience quota.retry.dev>
//	{"want":3,"due":3,"demand":12.5}
//
//	200 {"granted":3,"first":-20000000,"spacing":10000000,"lateness":490000000,"rate":27.5,"fleetDemand":40,"pods":4}
//
// The namespace and the pod come from the verified token, the rate, burst,
// concurrency and onStoreLoss from the SharedQuota's spec: nothing the pod
// sends raises them. Every number it sends is bounded (Clamp).
//
//	status  when                                                     the sidecar
//	200     leased                                                   applies the reply
//	400     a body that is not one lease request                     store lost
//	401     token missing, malformed, expired, refused, not a pod's  revoked: denies at once
//	403     quota unknown or invalid, namespace gone or not admitted revoked: denies at once
//	413     a body over MaxBodyBytes                                 store lost
//	429     the pod leased more often than PodRate (Retry-After)     a late lease
//	503     the store or the API server does not answer              store lost: onStoreLoss
package leaseserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/utils/lru"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quota"
)

// Store is a quota store as the endpoint uses it: lease operations, and
// forgetting a namespace whose pods may no longer draw.
type Store interface {
	quota.Store
	Forgetter
}

// Forgetter drops every pod of a namespace from a quota's state, so that the
// share they held returns to the other pods with their next lease.
type Forgetter interface {
	Forget(ctx context.Context, spec quota.Spec, namespace string) error
}

// Stores gives the store of a SharedQuota, connected with the store's admin
// credentials.
type Stores interface {
	Store(ctx context.Context, s v1alpha1.RedisStore) (Store, error)
}

// StoresFunc adapts a function to Stores.
type StoresFunc func(ctx context.Context, s v1alpha1.RedisStore) (Store, error)

// Store implements Stores.
func (f StoresFunc) Store(ctx context.Context, s v1alpha1.RedisStore) (Store, error) {
	return f(ctx, s)
}

// Bounds of the endpoint.
const (
	// MaxBodyBytes bounds a request body: a lease request is about 150 bytes.
	MaxBodyBytes = 4 << 10
	// PodRate and PodBurst bound each pod's lease calls: a sidecar makes at
	// most 10 a second per quota (quota.Interval).
	PodRate  = 20
	PodBurst = 20
	// MaxPods bounds the pods whose call rate is tracked; the least recently
	// seen is dropped first.
	MaxPods = 1 << 16
	// forgetEvery is the least time between two Forgets of one namespace on
	// one quota: a revoked pod that keeps calling costs the store little.
	forgetEvery = time.Second
)

// Server is the lease endpoint, an http.Handler. Create it with New; safe for
// concurrent use.
type Server struct {
	auth   Authenticator
	quotas Quotas
	stores Stores
	log    logr.Logger
	now    func() time.Time
	mux    *http.ServeMux

	limiters  *lru.Cache // pod UID -> *rate.Limiter
	forgotten *lru.Cache // quota/namespace -> time.Time
}

// New returns the endpoint. now is its clock, nil for time.Now.
func New(auth Authenticator, quotas Quotas, stores Stores, log logr.Logger, now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	s := &Server{auth: auth, quotas: quotas, stores: stores, log: log, now: now,
		limiters: lru.New(MaxPods), forgotten: lru.New(4096), mux: http.NewServeMux()}
	s.mux.HandleFunc("POST "+v1alpha1.QuotaLeasePath("{quota}"), s.lease)
	return s
}

// ServeHTTP implements http.Handler, counting every answer by status code.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	s.mux.ServeHTTP(rec, r)
	countLease(rec.code)
}

// lease answers one lease request: authenticate, bound the pod's calls, read
// the body, authorize, lease.
func (s *Server) lease(w http.ResponseWriter, r *http.Request) {
	id, err := s.authenticate(r)
	if err != nil {
		s.refuse(w, err, "", Identity{})
		return
	}
	if !s.limiter(id.PodUID).AllowN(s.now(), 1) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many lease calls from this pod", http.StatusTooManyRequests)
		return
	}
	req, err := decode(w, r)
	if err != nil {
		s.refuse(w, err, "", id)
		return
	}
	name := r.PathValue("quota")
	q, err := s.quotas.Quota(r.Context(), name, id.Namespace)
	if err != nil {
		if q != nil {
			s.forget(r.Context(), q, id.Namespace)
		}
		s.refuse(w, err, name, id)
		return
	}
	spec := policyset.QuotaSpec(q)
	req = Clamp(req, spec, s.now())
	req.Pod, req.Namespace = id.Namespace+"/"+id.Pod, id.Namespace
	store, err := s.stores.Store(r.Context(), q.Spec.Store.Redis)
	if err != nil {
		s.refuse(w, fmt.Errorf("store of SharedQuota %s: %w", q.Name, err), name, id)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), quota.StoreTimeout)
	defer cancel()
	reply, err := store.Lease(ctx, spec, req)
	if err != nil {
		s.refuse(w, fmt.Errorf("lease on the store of SharedQuota %s: %w", q.Name, err), name, id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

// authenticate verifies the request's bearer token.
func (s *Server) authenticate(r *http.Request) (Identity, error) {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return Identity{}, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	return s.auth.Authenticate(r.Context(), h[len(prefix):])
}

// errBadRequest marks a body that is not one lease request.
var errBadRequest = errors.New("the body is not one lease request")

// decode reads one lease request, strictly: no unknown field, nothing after
// it, at most MaxBodyBytes.
func decode(w http.ResponseWriter, r *http.Request) (quota.LeaseRequest, error) {
	var req quota.LeaseRequest
	d := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return req, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if d.More() {
		return req, fmt.Errorf("%w: data after it", errBadRequest)
	}
	return req, nil
}

// refuse answers err with its status code and logs it, without the token.
func (s *Server) refuse(w http.ResponseWriter, err error, quotaName string, id Identity) {
	code := statusOf(err)
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	log := s.log.WithValues("quota", cut(quotaName), "namespace", id.Namespace, "pod", id.Pod, "code", code)
	if code == http.StatusServiceUnavailable {
		log.Info("lease failed", "error", err.Error())
	} else {
		log.V(1).Info("lease refused", "error", err.Error())
	}
	http.Error(w, http.StatusText(code), code)
}

// statusOf is the status code of a refusal (see the package's table).
func statusOf(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrBusy):
		return http.StatusTooManyRequests
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// limiter is the call rate limiter of the pod uid.
func (s *Server) limiter(uid string) *rate.Limiter {
	if v, ok := s.limiters.Get(uid); ok {
		return v.(*rate.Limiter)
	}
	l := rate.NewLimiter(PodRate, PodBurst)
	s.limiters.Add(uid, l) // two first calls at once may each add one: the later wins
	return l
}

// forget drops the namespace's pods from the quota's store, at most once per
// forgetEvery; a failure is logged (the store forgets them within
// quota.LeaseTTL anyway).
func (s *Server) forget(ctx context.Context, q *v1alpha1.SharedQuota, ns string) {
	key := q.Name + "/" + ns
	now := s.now()
	if v, ok := s.forgotten.Get(key); ok && now.Sub(v.(time.Time)) < forgetEvery {
		return
	}
	s.forgotten.Add(key, now)
	store, err := s.stores.Store(ctx, q.Spec.Store.Redis)
	if err == nil {
		err = store.Forget(ctx, policyset.QuotaSpec(q), ns)
	}
	if err != nil {
		s.log.Info("forgetting a namespace's pods failed", "quota", q.Name, "namespace", ns, "error", err.Error())
	}
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
