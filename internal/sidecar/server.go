package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/retrydev/retry-operator/internal/h1client"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Options are the sidecar's settings, one per command-line flag.
type Options struct {
	Listen      string // forward proxy, loopback only
	AdminListen string // /healthz, /readyz, /metrics, on loopback
	StatsListen string // /metrics, /config, on the pod IP; empty: not served
	Sources     Sources

	DrainTimeout time.Duration
	LogLevel     slog.Level

	// Upstream connection pool.
	MaxIdleConns        int
	MaxIdleConnsPerHost int
	MaxConnsPerHost     int
	IdleConnTimeout     time.Duration
	DialTimeout         time.Duration

	// ReloadDebounce collapses a burst of file events into one reload;
	// ResyncInterval re-reads the sources even without events.
	ReloadDebounce time.Duration
	ResyncInterval time.Duration

	// ReadyFile, if set, receives {"listen": …, "admin": …, "stats": …} once the listeners
	// are bound (how tests and scripts learn ephemeral ports).
	ReadyFile   string
	EnablePprof bool

	Stderr io.Writer
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{
		Listen:              "127.0.0.1:15001",
		AdminListen:         "127.0.0.1:15020",
		StatsListen:         DefaultStatsListen,
		DrainTimeout:        20 * time.Second,
		LogLevel:            slog.LevelInfo,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DialTimeout:         5 * time.Second,
		ReloadDebounce:      100 * time.Millisecond,
		ResyncInterval:      time.Minute,
		Stderr:              os.Stderr,
	}
}

// UpstreamTransport is the connection pool every attempt uses: HTTP/1.1 keep-alive
// with a large idle pool per host, no proxy from the environment (the sidecar IS
// the proxy), and no transparent gzip (Accept-Encoding passes through untouched).
func UpstreamTransport(o Options) *http.Transport {
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          o.MaxIdleConns,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		MaxConnsPerHost:       o.MaxConnsPerHost,
		IdleConnTimeout:       o.IdleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        16 << 10,
	}
}

// UpstreamClient is what every attempt is sent with: h1client for plain http://
// upstreams (request written and response read on the handler's goroutine, over
// the same keep-alive pool limits), falling back to UpstreamTransport for https,
// upgrades, Expect: 100-continue and streamed or large request bodies.
func UpstreamClient(o Options) *h1client.Transport {
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &h1client.Transport{
		DialContext:         d.DialContext,
		Fallback:            UpstreamTransport(o),
		MaxIdleConns:        o.MaxIdleConns,
		MaxIdleConnsPerHost: o.MaxIdleConnsPerHost,
		MaxConnsPerHost:     o.MaxConnsPerHost,
		IdleConnTimeout:     o.IdleConnTimeout,
		ReadBufferSize:      16 << 10,
		WriteBufferSize:     16 << 10,
	}
}

// Run serves until ctx ends (SIGTERM), then drains: it stops accepting, lets the
// requests and tunnels in flight finish within DrainTimeout, closes what is
// left, and returns nil. It returns an error only if it cannot start.
func Run(ctx context.Context, o Options) error {
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	log := slog.New(slog.NewJSONHandler(o.Stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	if err := checkLoopback(o.Listen); err != nil {
		return err
	}
	metrics := NewMetrics()
	reloader := NewReloader(o.Sources, log, metrics)
	metrics.WatchLimits(reloader.EachLimits)
	if err := reloader.Reload(); err != nil {
		log.Warn("starting without a configuration: not ready until a valid one is loaded")
	}

	upstream := UpstreamClient(o)
	rt := &retrypolicy.Transport{
		Inner:    upstream,
		Route:    reloader.Route,
		Observer: retrypolicy.Observers{metrics, NewLogObserver(log)},
	}
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	aln, err := net.Listen("tcp", o.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--admin-listen: %w", err)
	}
	var sln net.Listener
	if o.StatsListen != "" {
		if sln, err = net.Listen("tcp", o.StatsListen); err != nil {
			ln.Close()
			aln.Close()
			return fmt.Errorf("--stats-listen: %w", err)
		}
	}
	proxy := &Proxy{Transport: rt, Dial: dialer.Dial, Metrics: metrics, Log: log,
		Route: reloader.Route, Self: ln.Addr().String()}
	admin := &Admin{Reloader: reloader, Metrics: metrics, Pprof: o.EnablePprof}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: errLog}
	asrv := &http.Server{Handler: admin.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}

	stats := &Stats{Reloader: reloader, Metrics: metrics, Sources: o.Sources}
	ssrv := &http.Server{Handler: stats.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}

	serveErr := make(chan error, 3)
	go func() { serveErr <- srv.Serve(ln) }()
	go func() { serveErr <- asrv.Serve(aln) }()
	statsAddr := ""
	if sln != nil {
		statsAddr = sln.Addr().String()
		go func() { serveErr <- ssrv.Serve(sln) }()
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go func() {
		if err := reloader.Watch(watchCtx, o.ReloadDebounce, o.ResyncInterval); err != nil {
			log.Warn("file watching unavailable; relying on periodic resync", "error", err.Error())
		}
	}()

	log.Info("retry-sidecar listening", "listen", ln.Addr().String(), "admin", aln.Addr().String(), "stats", statsAddr)
	if o.ReadyFile != "" {
		if err := writeReadyFile(o.ReadyFile, ln.Addr().String(), aln.Addr().String(), statsAddr); err != nil {
			log.Error("cannot write --ready-file", "error", err.Error())
		}
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("server stopped", "error", err.Error())
	}

	// Drain: readiness goes red, the listener closes, requests and tunnels in
	// flight get DrainTimeout to finish.
	admin.draining.Store(true)
	log.Info("draining", "timeout", o.DrainTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), o.DrainTimeout)
	defer cancel()
	clean := srv.Shutdown(dctx) == nil
	clean = proxy.tunnels.drain(dctx) && clean
	if !clean {
		srv.Close()
		log.Warn("drain timeout reached; closed the connections still open")
	}
	upstream.CloseIdleConnections()
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = asrv.Shutdown(actx)
	_ = ssrv.Shutdown(actx)
	log.Info("stopped", "clean", clean)
	return nil
}

// checkLoopback refuses a proxy address that is not a loopback address: the
// sidecar is the pod's own proxy and must not be reachable from the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %q: must be a loopback address such as 127.0.0.1:15001 or [::1]:15001", addr)
}

func writeReadyFile(path, listen, admin, stats string) error {
	b, err := json.Marshal(map[string]any{"listen": listen, "admin": admin, "stats": stats, "pid": os.Getpid()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return errors.Join(os.Rename(tmp.Name(), path))
}
