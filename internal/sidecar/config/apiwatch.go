package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// APIWatch follows the namespace's retry-policies ConfigMap through the API
// server: one object, listed and watched by name (field selector
// metadata.name=retry-policies), with the pod's own projected service-account
// token (docs/fleet.md). The kubelet refreshes a mounted ConfigMap only every
// minute or so; the watch delivers an edit within a second.
//
// While the watch runs, every change goes to Reloader.setAPI. When the API
// server cannot be reached or refuses the token, the Reloader is told to follow
// the mounted file alone; readiness is unaffected. Each change of that state
// is one log line and the retry_sidecar_config_api_* metrics.
type APIWatch struct {
	Client    rest.Interface
	Namespace string
	Reloader  *Reloader
	Log       *slog.Logger
	Metrics   Metrics
	// WatchTimeout bounds one watch request; the API server ends it then and the
	// watch starts again where it stopped. Jittered by up to a quarter.
	WatchTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before retrying a failed list
	// (nextBackoff); UnreachableMaxBackoff replaces MaxBackoff while the API
	// server does not answer at all.
	MinBackoff, MaxBackoff, UnreachableMaxBackoff time.Duration

	state apiWatchState
}

// apiWatchState is where the API watch stands: not tried yet (the zero value),
// up, or fallen back to the mounted file for a reason. A fallback's value is
// its reason label on retry_sidecar_config_api_fallbacks_total and in the log.
type apiWatchState string

const (
	apiWatchUp apiWatchState = "up"
	// apiFallbackUnreachable: anything else; the API server did not answer, or
	// failed.
	apiFallbackUnreachable apiWatchState = "unreachable"
	// apiFallbackForbidden: the token is refused, or lacks the RoleBinding.
	apiFallbackForbidden apiWatchState = "forbidden"
	// apiFallbackError: the watch cannot work at all (bad credentials, a request
	// the API server rejects).
	apiFallbackError apiWatchState = "error"
)

// fallbackReason classifies an error of listing or watching retry-policies.
func fallbackReason(err error) apiWatchState {
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return apiFallbackForbidden
	case apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err):
		return apiFallbackError
	default:
		return apiFallbackUnreachable
	}
}

// APICredentials are the files of the projected volume the injector mounts
// into the sidecar container only: token (audience-bound, rotated by the
// kubelet), ca.crt and namespace.
type APICredentials struct {
	Dir string
	// Server is the API server URL; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
	Server string
}

// newAPIWatch builds the REST client from the credentials. The client knows
// only core/v1 ConfigMaps, so the sidecar carries no other API types.
func newAPIWatch(creds APICredentials, r *Reloader, log *slog.Logger, m Metrics) (*APIWatch, error) {
	server := creds.Server
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("--api-server is empty and KUBERNETES_SERVICE_HOST/PORT are not set")
		}
		server = "https://" + net.JoinHostPort(host, port)
	}
	nsBytes, err := os.ReadFile(filepath.Join(creds.Dir, "namespace"))
	if err != nil {
		return nil, fmt.Errorf("--api-credentials-dir: %w", err)
	}
	ns := strings.TrimSpace(string(nsBytes))
	if ns == "" {
		return nil, fmt.Errorf("--api-credentials-dir: %s is empty", filepath.Join(creds.Dir, "namespace"))
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:            server,
		BearerTokenFile: filepath.Join(creds.Dir, "token"), // re-read as the kubelet rotates it
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(creds.Dir, "ca.crt")},
		UserAgent:       "retry-sidecar",
		QPS:             5,
		Burst:           10,
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &corev1.SchemeGroupVersion,
			NegotiatedSerializer: serializer.NewCodecFactory(scheme).WithoutConversion(),
			ContentType:          runtime.ContentTypeJSON,
		},
		APIPath: "/api",
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return &APIWatch{Client: client, Namespace: ns, Reloader: r, Log: log, Metrics: m}, nil
}

// Run follows retry-policies until ctx ends: a list, then client-go's
// RetryWatcher, which resumes the watch from the last resourceVersion each
// time it ends (its timeout, an API server restart). The object is listed
// again only when the watch is refused or its resourceVersion has expired
// (410 Gone), after a failed list with the backoff of nextBackoff.
func (w *APIWatch) Run(ctx context.Context) {
	w.setDefaults()
	// The RetryWatcher logs every failed watch through klog; the sidecar
	// reports them itself (down), one structured line per change of state.
	ctx = klog.NewContext(ctx, logr.Discard())
	var backoff time.Duration
	for ctx.Err() == nil {
		err := w.listAndWatch(ctx)
		if err == nil || ctx.Err() != nil {
			backoff = 0
			continue
		}
		w.down(err)
		backoff = w.nextBackoff(backoff, err)
		sleep(ctx, jittered(backoff))
	}
}

func (w *APIWatch) setDefaults() {
	if w.WatchTimeout <= 0 {
		w.WatchTimeout = 5 * time.Minute
	}
	if w.MinBackoff <= 0 {
		w.MinBackoff = 500 * time.Millisecond
	}
	if w.MaxBackoff <= 0 {
		w.MaxBackoff = 30 * time.Second
	}
	if w.UnreachableMaxBackoff <= 0 {
		w.UnreachableMaxBackoff = 2 * time.Second
	}
}

// nextBackoff is the wait before listing again after err, when the previous
// wait was prev (0: the first failure): twice prev, at least MinBackoff, at
// most a cap. An API server that answered with an error (refused the token,
// throttled, failed) is asked again at most every MaxBackoff: sooner would
// only add to its load. One that did not answer at all (restarting, or out of
// reach) costs nothing to try, so the cap is UnreachableMaxBackoff: the watch
// resumes within that of its return, and an edit made then reaches the
// sidecar in seconds (docs/fleet.md).
//
// With the defaults (0.5 s, 30 s, 2 s): unreachable 0.5, 1, 2, 2, 2 s…;
// forbidden 0.5, 1, 2, 4, 8, 16, 30 s….
func (w *APIWatch) nextBackoff(prev time.Duration, err error) time.Duration {
	limit := w.MaxBackoff
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		limit = w.UnreachableMaxBackoff
	}
	return min(max(2*prev, w.MinBackoff), limit)
}

// jittered draws a wait from [d/2, d]: a fleet that lost the API server
// together does not come back in step.
func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// policiesSelector selects retry-policies alone.
var policiesSelector = fields.OneTermEqualSelector("metadata.name", v1alpha1.PoliciesConfigMapName).String()

// listAndWatch lists retry-policies, hands it on, then follows its changes
// until the watch stops for good. It returns nil when the object must be
// listed again at once (410 Gone, ctx ended), and the error of a failed list
// or a refused watch.
func (w *APIWatch) listAndWatch(ctx context.Context) error {
	var list corev1.ConfigMapList
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := w.Client.Get().Namespace(w.Namespace).Resource("configmaps").
		VersionedParams(&metav1.ListOptions{FieldSelector: policiesSelector}, metav1.ParameterCodec).
		Do(lctx).Into(&list)
	cancel()
	if err != nil {
		return err
	}
	w.up()
	cm := firstConfigMap(list.Items)
	w.deliver(cm)

	restarts := make(chan error)
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &restarter{w: w, report: restarts})
	if err != nil {
		return err
	}
	defer func() {
		rw.Stop()
		<-rw.Done()
	}()
	return w.follow(rw, restarts, cm)
}

// follow hands each change the watch delivers to the Reloader, and each
// failure and recovery of its restarts to down and up, until the watch stops
// for good: nil to list again (410 Gone; ctx ended), or the error that
// stopped it (the token refused).
func (w *APIWatch) follow(rw *watchtools.RetryWatcher, restarts <-chan error, last *corev1.ConfigMap) error {
	for {
		select {
		case err := <-restarts:
			if err != nil {
				w.down(err)
				continue
			}
			// The watch resumed where it stopped: what was last delivered is
			// current, and any edit since follows as an event.
			w.up()
			w.deliver(last)
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
					last = cm
					w.deliver(cm)
				}
			case watch.Deleted:
				last = nil
				w.deliver(nil)
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					return nil
				}
				return err
			}
		}
	}
}

// restarter is what the RetryWatcher starts each watch with: it adds the
// field selector and a jittered timeout to the request, waits out
// nextBackoff after a failed request (the RetryWatcher itself tries again
// every second, whatever the error), and reports to follow each failure and
// the first success after one. Only the RetryWatcher's goroutine calls it.
type restarter struct {
	w      *APIWatch
	report chan<- error
	// backoff is the wait before the next request; 0 while the last succeeded.
	backoff time.Duration
}

// WatchWithContext implements cache.WatcherWithContext.
func (r *restarter) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if r.backoff > 0 && !sleep(ctx, jittered(r.backoff)) {
		return nil, ctx.Err()
	}
	opts.Watch, opts.FieldSelector = true, policiesSelector
	timeout := int64((r.w.WatchTimeout + time.Duration(rand.Int64N(int64(r.w.WatchTimeout)/4+1))) / time.Second)
	opts.TimeoutSeconds = &timeout
	wi, err := r.w.Client.Get().Namespace(r.w.Namespace).Resource("configmaps").
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
	switch {
	case err != nil:
		r.backoff = r.w.nextBackoff(r.backoff, err)
	case r.backoff > 0:
		r.backoff = 0
	default:
		return wi, nil
	}
	select {
	case r.report <- err:
	case <-ctx.Done():
	}
	return wi, err
}

func firstConfigMap(items []corev1.ConfigMap) *corev1.ConfigMap {
	for i := range items {
		if items[i].Name == v1alpha1.PoliciesConfigMapName {
			return &items[i]
		}
	}
	return nil
}

// deliver hands policies.json (nil: no ConfigMap, or no such key) to the
// Reloader. A refused document is reported there.
func (w *APIWatch) deliver(cm *corev1.ConfigMap) {
	var data []byte
	if cm != nil {
		if v, ok := cm.Data[v1alpha1.PoliciesConfigMapKey]; ok {
			data = []byte(v)
		}
	}
	_ = w.Reloader.setAPI(true, data)
}

func (w *APIWatch) up() {
	if w.state == apiWatchUp {
		return
	}
	w.state = apiWatchUp
	w.Metrics.APIWatchUp(true)
	w.Log.Info("following retry-policies through the API server", "namespace", w.Namespace)
}

// down switches to the mounted file alone; logged and counted once per reason.
func (w *APIWatch) down(err error) {
	reason := fallbackReason(err)
	_ = w.Reloader.setAPI(false, nil)
	if w.state == reason {
		return
	}
	w.state = reason
	w.Metrics.APIWatchUp(false)
	w.Metrics.APIWatchFallback(string(reason))
	w.Log.Warn("API server watch of retry-policies unavailable; following the mounted file", "reason", string(reason), "error", err.Error())
}

// WatchSources follows the policy sources of r until ctx ends: the mounted
// files (watch, debounced, with a resync as a safety net) and, with API
// credentials (api.Dir set), retry-policies through the API server. The
// watches run on goroutines of their own; it returns at once.
func WatchSources(ctx context.Context, r *Reloader, api APICredentials, debounce, resync time.Duration) {
	go func() {
		if err := r.watch(ctx, debounce, resync); err != nil {
			r.Log.Warn("file watching unavailable; relying on periodic resync", "error", err.Error())
		}
	}()
	if api.Dir == "" {
		return
	}
	aw, err := newAPIWatch(api, r, r.Log, r.Metrics)
	if err != nil {
		r.Metrics.APIWatchFallback(string(apiFallbackError))
		r.Log.Warn("cannot watch retry-policies through the API server; following the mounted file", "reason", string(apiFallbackError), "error", err.Error())
		return
	}
	go aw.Run(ctx)
}
