package config

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Reloader keeps the configuration in force and replaces it when its sources
// change. A configuration that fails to read, parse or validate is refused: the
// previous one stays, the error is logged and counted, and readiness is kept.
// Requests in flight hold the *Policy they started with, so a reload never
// changes a request midway; the Registry carries each upstream's budget, tokens
// and in-flight slots over to the new policies. Safe for concurrent use.
type Reloader struct {
	Sources  Sources
	Log      *slog.Logger
	Metrics  Metrics
	registry *retrypolicy.Registry
	quotas   *quotaClients

	current atomic.Pointer[Config]
	// api is the API watch's delivery of policies.json, nil while the watch
	// does not run (setAPI).
	api atomic.Pointer[delivery]

	mu        sync.Mutex // serialises Reload
	failedKey string     // last refused input, so it is reported once
	inForce   int64      // revision in force: never goes down
	staleKey  string     // last delivery refused as older, so it is reported once
	// credFiles are the credentials files the last compiled input named: the
	// next Reload reads them before it decides whether anything changed.
	credFiles []string
	// watcher is Watch's, nil while Watch does not run; watched are the
	// directories it watches.
	watcher *fsnotify.Watcher
	watched map[string]bool
}

// setAPI hands the Reloader the API watch's view of policies.json (data nil:
// the ConfigMap does not exist), or with running false says the watch is not
// running and the mounted file is followed alone. It reloads at once.
func (r *Reloader) setAPI(running bool, data []byte) error {
	if running {
		r.api.Store(&delivery{source: SourceAPI, data: data})
	} else {
		r.api.Store(nil)
	}
	return r.Reload()
}

// NewReloader returns a Reloader with no configuration yet (not ready).
func NewReloader(src Sources, log *slog.Logger, m Metrics) *Reloader {
	return &Reloader{Sources: src, Log: log, Metrics: m, registry: &retrypolicy.Registry{}, quotas: newQuotaClients(log, m)}
}

// PolicyName is the RetryPolicy (namespace/name) of p in the configuration
// in force, or "".
func (r *Reloader) PolicyName(p *retrypolicy.Policy) string {
	c := r.current.Load()
	if c == nil {
		return ""
	}
	return c.policies[p.Name()]
}

// EachLimits calls yield with the admission state of every upstream in force.
func (r *Reloader) EachLimits(yield func(upstream string, l *limits.State)) {
	c := r.current.Load()
	if c == nil {
		return
	}
	for _, name := range c.Upstreams {
		if l := r.registry.Get(name); l != nil {
			yield(name, l)
		}
	}
}

// Ready reports whether a configuration has been loaded.
func (r *Reloader) Ready() bool { return r.current.Load() != nil }

// Current is the configuration in force, or nil.
func (r *Reloader) Current() *Config { return r.current.Load() }

// Reload reads the sources and, if they changed, puts the new configuration in
// force. It returns the error of a refused configuration (already logged and
// counted), nil when the configuration is in force or unchanged.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, err := r.Sources.read()
	if err == nil {
		in.readQuotaCreds(r.credFiles)
		if api := r.api.Load(); api != nil || r.Sources.ConfigDir != "" {
			var file *delivery
			if r.Sources.ConfigDir != "" {
				file = &delivery{source: SourceFile, data: in.dir}
			}
			d, ok := choose(file, api, r.inForce)
			if !ok {
				r.refuseStale(file, api)
				return nil
			}
			in.dir, in.source = d.data, d.source
			in.revision, _ = d.revision()
			in.revision = max(in.revision, r.inForce)
		}
		key := in.key()
		if cur := r.current.Load(); cur != nil && cur.key == key {
			r.failedKey = ""
			return nil
		}
		if key == r.failedKey {
			return nil // the same broken input again: already reported
		}
		var c *Config
		c, err = in.compile(r.Sources, r.quotas)
		r.credFiles = in.credFiles
		for _, f := range in.credFiles {
			r.watchDir(filepath.Dir(f))
		}
		if err == nil {
			r.registry.AdoptPoliciesAt(time.Now(), c.Policies()...)
			r.current.Store(c)
			r.quotas.retain(c.Quotas)
			r.failedKey, r.staleKey = "", ""
			r.inForce = c.Revision
			r.Metrics.ConfigLoaded(c.Hash, c.Upstreams, c.Revision)
			r.Log.Info("configuration loaded", "hash", c.Hash, "revision", c.Revision, "source", c.Source, "upstreams", c.Upstreams)
			return nil
		}
		r.failedKey = in.key() // with the credentials files this input named
		if cur := r.current.Load(); cur != nil {
			r.quotas.retain(cur.Quotas) // clients made for the refused configuration go
		} else {
			r.quotas.retain(nil)
		}
	}
	r.Metrics.ConfigRefused()
	kept := ""
	if cur := r.current.Load(); cur != nil {
		kept = cur.Hash
	}
	r.Log.Error("configuration refused; the previous one stays in force", "error", err.Error(), "kept_hash", kept)
	return err
}

// refuseStale reports, once per delivery, that the authoritative source holds
// an older revision than the one in force (the kubelet's copy of the
// ConfigMap lags behind the API watch that delivered the newer one).
func (r *Reloader) refuseStale(file, api *delivery) {
	d := api
	if d == nil {
		d = file
	}
	rev, _ := d.revision()
	key := d.source + ":" + strconv.FormatInt(rev, 10)
	if key == r.staleKey {
		return
	}
	r.staleKey = key
	r.Metrics.ConfigStale(d.source)
	r.Log.Info("older revision refused; the configuration in force stays", "source", d.source, "revision", rev, "in_force", r.inForce)
}

// watchDirs makes w Reload's watcher (nil: none) and adds to it the
// directory of every source, and of the credentials files the configuration
// names (docs/quota.md#credentials: the mounted Secret), each once.
func (r *Reloader) watchDirs(w *fsnotify.Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watcher, r.watched = w, map[string]bool{}
	if w == nil {
		return
	}
	r.watchDir(r.Sources.ConfigDir)
	for _, f := range r.Sources.PolicyFiles {
		r.watchDir(filepath.Dir(f))
	}
	if r.Sources.PodLabels != "" {
		r.watchDir(filepath.Dir(r.Sources.PodLabels))
	}
	if r.Sources.QuotaCredentials != "" {
		r.watchDir(filepath.Dir(r.Sources.QuotaCredentials))
	}
	for _, f := range r.credFiles {
		r.watchDir(filepath.Dir(f))
	}
}

// watchDir adds dir to the watcher, once; a directory that cannot be watched
// is logged and left to the periodic resync. r.mu must be held.
func (r *Reloader) watchDir(dir string) {
	if r.watcher == nil || dir == "" || r.watched[dir] {
		return
	}
	r.watched[dir] = true
	if err := r.watcher.Add(dir); err != nil {
		r.Log.Warn("cannot watch directory; relying on periodic resync", "dir", dir, "error", err.Error())
	}
}

// watch reloads whenever a watched directory changes, debounced, and every
// resync as a safety net. It watches directories, not files: the kubelet
// updates a ConfigMap or downward API volume by swapping the ..data symlink, and
// editors save by rename, neither of which a watch on the file itself survives.
// It returns when ctx ends.
func (r *Reloader) watch(ctx context.Context, debounce, resync time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	r.watchDirs(w)
	defer r.watchDirs(nil)
	// The sidecar serves before this goroutine runs: a file changed between
	// the first load and the watch being in place raised no event, and
	// would wait for the resync (a minute). Read the sources once more.
	_ = r.Reload()

	if resync <= 0 {
		resync = time.Minute
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			timer.Reset(debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.Log.Warn("file watch error", "error", err.Error())
		case <-timer.C:
			_ = r.Reload()
		case <-tick.C:
			_ = r.Reload()
		}
	}
}
