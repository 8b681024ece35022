package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// How the manager learns which revision each sidecar runs (status.programmedPods,
// docs/fleet.md): after a change it asks every ready injected pod whose
// revision is not known to be current, GET http://<podIP>:15090/config, and
// comes back with a growing delay until all of them report the namespace's
// revision, or stops after convergeAttempts tries. Nothing polls a converged
// namespace; the next change (a policy edit, a pod becoming ready) starts again.
const (
	// convergeAttempts bounds the requeues of one change: about 30 s in all.
	convergeAttempts = 10
	// convergeFirstDelay doubles on every attempt, up to convergeMaxDelay.
	convergeFirstDelay = 200 * time.Millisecond
	convergeMaxDelay   = 5 * time.Second
	// probeTimeout bounds one GET /config; probeParallel the GETs of one
	// reconcile; probeRate/probeBurst all GETs of the manager.
	probeTimeout  = time.Second
	probeParallel = 8
	probeRate     = 50
	probeBurst    = 50
)

// ConvergeDelay is the wait before the attempt-th look at a namespace that has
// not converged (attempt counts from 0):
//
//	attempt 0 -> 200ms, 1 -> 400ms, 2 -> 800ms, 3 -> 1.6s, 4 -> 3.2s, 5 and later -> 5s
func ConvergeDelay(attempt int) time.Duration {
	d := convergeFirstDelay
	for range attempt {
		d *= 2
		if d >= convergeMaxDelay {
			return convergeMaxDelay
		}
	}
	return d
}

// revisionTracker remembers, per pod, the last revision its sidecar reported,
// and per namespace, how often the current change has been looked at. A
// sidecar never goes back to an older revision, so a pod known to be at the
// namespace's revision is not asked again. Safe for concurrent use.
type revisionTracker struct {
	mu       sync.Mutex
	pods     map[string]map[types.UID]int64 // namespace -> pod -> revision
	attempts map[string]convergence
}

// convergence is the state of one namespace's current change.
type convergence struct {
	revision int64 // the namespace's revision
	ready    int   // ready pods with an IP
	attempts int
}

func (t *revisionTracker) known(ns string, uid types.UID) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pods[ns][uid]
}

func (t *revisionTracker) set(ns string, uid types.UID, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods == nil {
		t.pods = map[string]map[types.UID]int64{}
	}
	if t.pods[ns] == nil {
		t.pods[ns] = map[types.UID]int64{}
	}
	t.pods[ns][uid] = max(t.pods[ns][uid], rev)
}

// prune forgets the pods of ns that are not in keep.
func (t *revisionTracker) prune(ns string, keep map[types.UID]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid := range t.pods[ns] {
		if !keep[uid] {
			delete(t.pods[ns], uid)
		}
	}
	if len(keep) == 0 {
		delete(t.pods, ns)
		delete(t.attempts, ns)
	}
}

// next records one more look at the change (revision, ready) of ns and
// returns how many looks there were before it; a different change starts at 0.
func (t *revisionTracker) next(ns string, revision int64, ready int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.attempts == nil {
		t.attempts = map[string]convergence{}
	}
	c := t.attempts[ns]
	if c.revision != revision || c.ready != ready {
		c = convergence{revision: revision, ready: ready}
	}
	n := c.attempts
	c.attempts++
	t.attempts[ns] = c
	return n
}

func (t *revisionTracker) converged(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.attempts, ns)
}

// sidecarProber asks sidecars for their /config.
type sidecarProber struct {
	client  *http.Client
	limiter *rate.Limiter
	// url is where a pod's sidecar answers; "" when it cannot be asked (no IP).
	url func(*corev1.Pod) string
}

func newSidecarProber(url func(*corev1.Pod) string) *sidecarProber {
	if url == nil {
		url = DefaultSidecarConfigURL
	}
	return &sidecarProber{
		client: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second,
			DialContext: (&net.Dialer{Timeout: probeTimeout}).DialContext,
		}},
		limiter: rate.NewLimiter(probeRate, probeBurst),
		url:     url,
	}
}

// DefaultSidecarConfigURL is http://<podIP>:15090/config.
func DefaultSidecarConfigURL(p *corev1.Pod) string {
	if p.Status.PodIP == "" {
		return ""
	}
	return "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(v1alpha1.StatsPort)) + "/config"
}

// revision asks one sidecar for the revision in force.
func (s *sidecarProber) revision(ctx context.Context, p *corev1.Pod) (int64, error) {
	u := s.url(p)
	if u == "" {
		return 0, fmt.Errorf("pod %s has no IP", p.Name)
	}
	if err := s.limiter.Wait(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return 0, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var c policyset.ConfigStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&c); err != nil {
		return 0, fmt.Errorf("GET %s: %w", u, err)
	}
	return c.Revision, nil
}

func (r *RetryPolicyReconciler) sidecarProber() *sidecarProber {
	r.proberOnce.Do(func() {
		if r.prober == nil {
			r.prober = newSidecarProber(r.SidecarConfigURL)
		}
	})
	return r.prober
}

// refreshRevisions asks the ready pods of ns whose known revision is below
// target, probeParallel at a time, and records the answers. A pod that does not
// answer keeps its last known revision.
func (r *RetryPolicyReconciler) refreshRevisions(ctx context.Context, ns string, pods []corev1.Pod, target int64) {
	// One pass takes at most about two probe timeouts, however many sidecars
	// do not answer.
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout)
	defer cancel()
	keep := make(map[types.UID]bool, len(pods))
	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	for i := range pods {
		p := &pods[i]
		keep[p.UID] = true
		if target <= 0 || !podReady(p) || r.revisions.known(ns, p.UID) >= target {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if rev, err := r.sidecarProber().revision(ctx, p); err == nil {
				r.revisions.set(ns, p.UID, rev)
			}
		}()
	}
	wg.Wait()
	r.revisions.prune(ns, keep)
}

// convergeAfter returns how long to wait before looking at ns again: 0 when
// every ready pod runs revision (or after convergeAttempts looks at this change).
func (r *RetryPolicyReconciler) convergeAfter(ns string, pods []corev1.Pod, revision int64) time.Duration {
	if revision <= 0 {
		r.revisions.converged(ns)
		return 0
	}
	ready, behind := 0, 0
	for i := range pods {
		if !podReady(&pods[i]) {
			continue
		}
		ready++
		if r.revisions.known(ns, pods[i].UID) < revision {
			behind++
		}
	}
	if behind == 0 {
		r.revisions.converged(ns)
		return 0
	}
	n := r.revisions.next(ns, revision, ready)
	if n >= convergeAttempts {
		return 0
	}
	return ConvergeDelay(n)
}
