package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
	"github.com/retrydev/retry-operator/internal/sidecar/h1server"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
)

// Options are the sidecar's settings, one per command-line flag.
type Options struct {
	Listen string // forward proxy, loopback only
	// TransparentListen, if set, serves connections redirected by the
	// interception rules (Transparent), loopback only.
	TransparentListen string
	AdminListen       string // /healthz, /readyz, /metrics
	// StatsListen serves /metrics and /config on the pod IP; empty: not served.
	StatsListen string
	Sources     config.Sources
	// API, when API.Dir is set, watches retry-policies through the API server
	// besides the mounted file (docs/fleet.md).
	API config.APICredentials

	DrainTimeout time.Duration
	LogLevel     slog.Level

	// Upstream connection pool.
	MaxIdleConns        int
	MaxIdleConnsPerHost int
	MaxConnsPerHost     int
	IdleConnTimeout     time.Duration
	DialTimeout         time.Duration

	// MaxReplayMemory caps the bytes all request replay buffers hold at once
	// (--max-replay-memory); 0 means DefaultMaxReplayMemory().
	MaxReplayMemory int64

	// TracingQueueBytes caps the bytes of the spans waiting for export
	// (--tracing-queue-bytes); 0 means tracing.DefaultQueueBytes.
	TracingQueueBytes int

	// ReloadDebounce collapses a burst of file events into one reload;
	// ResyncInterval re-reads the sources even without events.
	ReloadDebounce time.Duration
	ResyncInterval time.Duration

	// ReadyFile, if set, receives {"listen": …, "admin": …, "stats": …} once the listeners
	// are bound (how tests and scripts learn ephemeral ports).
	ReadyFile   string
	EnablePprof bool
	// FastPath serves the app's plain HTTP/1.1 requests on --listen with
	// internal/sidecar/h1server, handing everything else to net/http.Server
	// (--http1-fast-path; docs/performance.md#the-app-side-server).
	FastPath bool
	// HTTP1UpstreamClient sends plain HTTP/1.1 attempts with
	// internal/sidecar/h1client; false sends them with net/http's Transport
	// (--http1-upstream-client; docs/performance.md#the-upstream-client).
	HTTP1UpstreamClient bool

	// StatsMaxConnections caps the stats connections open at once; those
	// beyond are reset and counted (--stats-max-connections).
	StatsMaxConnections int

	Stderr io.Writer
}

// DefaultOptions are the flag defaults.
func DefaultOptions() Options {
	return Options{
		Listen:              net.JoinHostPort("127.0.0.1", strconv.Itoa(v1alpha1.ProxyPort)),
		AdminListen:         net.JoinHostPort("127.0.0.1", strconv.Itoa(v1alpha1.AdminPort)),
		StatsListen:         DefaultStatsListen,
		StatsMaxConnections: DefaultStatsMaxConnections,
		DrainTimeout:        20 * time.Second,
		LogLevel:            slog.LevelInfo,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DialTimeout:         5 * time.Second,
		ReloadDebounce:      100 * time.Millisecond,
		ResyncInterval:      time.Minute,
		FastPath:            true,
		HTTP1UpstreamClient: true,
		Stderr:              os.Stderr,
	}
}

// DefaultMaxReplayMemory is a quarter of the Go memory limit (GOMEMLIMIT, which
// the injector sets from the container's memory limit), or 32 MiB without one.
func DefaultMaxReplayMemory() int64 {
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return lim / 4
	}
	return 32 << 20
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
// upgrades, Expect: 100-continue and streamed or large request bodies. Upstreams
// whose policy has tls are reached through its RoundTripTLS (docs/tls.md),
// the dial and handshake bounded by DialTimeout.
//
// With HTTP1UpstreamClient false every plain request goes to UpstreamTransport
// (h1client.Transport.HandOffAll), as net/http cannot resend it on its own.
//
// A dial that lands on one of the sidecar's own listeners fails with errLoop.
func UpstreamClient(o Options, listeners ...net.Addr) *h1client.Transport {
	self := newSelfAddrs(listeners...)
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	pooled := UpstreamTransport(o)
	pooled.DialContext = self.dialContext(d.DialContext)
	once := pooled.Clone()
	once.DisableKeepAlives = true
	return &h1client.Transport{
		DialContext:         self.dialContext(d.DialContext),
		Fallback:            pooled,
		FallbackNoReuse:     once,
		MaxIdleConns:        o.MaxIdleConns,
		MaxIdleConnsPerHost: o.MaxIdleConnsPerHost,
		MaxConnsPerHost:     o.MaxConnsPerHost,
		IdleConnTimeout:     o.IdleConnTimeout,
		ReadBufferSize:      16 << 10,
		WriteBufferSize:     16 << 10,
		TLSDialTimeout:      o.DialTimeout,
		HandOffAll:          !o.HTTP1UpstreamClient,
	}
}

// Run serves until ctx ends (SIGTERM), then drains: it stops accepting, lets the
// requests and tunnels in flight finish within DrainTimeout, closes what is
// left, and returns nil. It returns an error only if it cannot start.
func Run(ctx context.Context, o Options) error {
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	log := slog.New(NewLogHandler(o.Stderr, o.LogLevel))
	if err := checkLoopback("--listen", o.Listen); err != nil {
		return err
	}
	if o.TransparentListen != "" {
		if err := checkLoopback("--transparent-listen", o.TransparentListen); err != nil {
			return err
		}
	}
	metrics := NewMetrics()
	tr, err := startTracing(ctx, log, metrics, o.TracingQueueBytes)
	if err != nil {
		return err
	}
	reloader := config.NewReloader(o.Sources, log, metrics)
	metrics.WatchLimits(reloader.EachLimits)
	if err := reloader.Reload(); err != nil {
		if len(o.Sources.PolicyFiles) > 0 {
			// The user named the files: a typo must stop here, not leave a
			// proxy passing traffic without retries (docs/sidecar.md).
			return fmt.Errorf("%w; the sidecar does not start without its --policy-file (a broken edit later keeps the last good one)", err)
		}
		log.Warn("starting without a configuration: not ready until a valid one is loaded")
	}
	ls, err := listen(ctx, o)
	if err != nil {
		return err
	}
	srv := newServers(o, log, ls, reloader, metrics, tr)
	serveErr := srv.serve(ls)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	config.WatchSources(watchCtx, reloader, o.API, o.ReloadDebounce, o.ResyncInterval)
	ls.announce(o.ReadyFile, log)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("server stopped", "error", err.Error())
	}
	srv.drain(o.DrainTimeout, log)
	tctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	_ = tr.Shutdown(tctx) // what the collector has not taken by then is lost
	return nil
}

// tracingShutdownTimeout bounds the export of the last spans at exit: a
// collector that is down never holds a stopping sidecar up for long.
const tracingShutdownTimeout = 500 * time.Millisecond

// startTracing starts the OTLP export the OTEL_* environment asks for
// (docs/observability.md#tracing), its queue holding at most queueBytes (0:
// the default), or returns nil when it asks for none.
func startTracing(ctx context.Context, log *slog.Logger, metrics *Metrics, queueBytes int) (*tracing.Tracing, error) {
	c, err := tracing.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	log.Info("tracing", c.LogAttrs()...)
	if queueBytes > 0 {
		c.Queue.Bytes = queueBytes
	}
	return tracing.New(ctx, c, metrics.traceCounters())
}

// listeners are the sidecar's sockets; stats and transparent are nil when
// their flag is empty.
type listeners struct {
	proxy, admin, stats, transparent net.Listener
}

// listen binds the listeners o asks for, in flag order; when one fails it
// closes those already bound.
func listen(ctx context.Context, o Options) (*listeners, error) {
	var lc net.ListenConfig
	ls := &listeners{}
	for _, l := range []struct {
		flag, addr string
		optional   bool
		ln         *net.Listener
	}{
		{"--listen", o.Listen, false, &ls.proxy},
		{"--admin-listen", o.AdminListen, false, &ls.admin},
		{"--stats-listen", o.StatsListen, true, &ls.stats},
		{"--transparent-listen", o.TransparentListen, true, &ls.transparent},
	} {
		if l.optional && l.addr == "" {
			continue
		}
		ln, err := lc.Listen(ctx, "tcp", l.addr)
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		*l.ln = ln
	}
	return ls, nil
}

func (ls *listeners) close() {
	for _, ln := range []net.Listener{ls.proxy, ls.admin, ls.stats, ls.transparent} {
		if ln != nil {
			ln.Close()
		}
	}
}

// own are the addresses a request must not loop back to: the proxy, admin and
// transparent listeners (the stats listener is on the pod IP).
func (ls *listeners) own() []net.Addr {
	own := []net.Addr{ls.proxy.Addr(), ls.admin.Addr()}
	if ls.transparent != nil {
		own = append(own, ls.transparent.Addr())
	}
	return own
}

// announce logs the bound addresses and writes them to readyFile, if set.
func (ls *listeners) announce(readyFile string, log *slog.Logger) {
	transparent, stats := "", ""
	if ls.transparent != nil {
		transparent = ls.transparent.Addr().String()
	}
	if ls.stats != nil {
		stats = ls.stats.Addr().String()
	}
	log.Info("retry-sidecar listening", "listen", ls.proxy.Addr().String(), "admin", ls.admin.Addr().String(), "transparent", transparent, "stats", stats)
	if readyFile != "" {
		if err := writeReadyFile(readyFile, ls.proxy.Addr().String(), ls.admin.Addr().String(), transparent, stats); err != nil {
			log.Error("cannot write --ready-file", "error", err.Error())
		}
	}
}

// servers are the sidecar's HTTP servers, one per listener (transparent and
// stats nil without theirs), and what draining them needs.
type servers struct {
	proxy, transparent server // --listen and --transparent-listen: app-side servers (appServer)
	admin, stats       *http.Server

	forward  *Proxy
	h2       *appHTTP2 // the app side's HTTP/2, on both listeners and in tunnels
	adminAPI *Admin
	upstream *upstreamStack
}

// newServers builds the upstream stack once and a server over it per listener
// of ls; the listeners differ only in how they name a request's upstream.
func newServers(o Options, log *slog.Logger, ls *listeners, reloader *config.Reloader, metrics *Metrics, tr *tracing.Tracing) *servers {
	stack := newUpstreamStack(o, log, ls.own(), reloader, metrics, tr)
	proxy := stack.proxy(byURL)
	admin := &Admin{Reloader: reloader, Metrics: metrics, Pprof: o.EnablePprof}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	h2 := newAppHTTP2(errLog)
	proxy.h2 = h2
	s := &servers{forward: proxy, h2: h2, adminAPI: admin, upstream: stack,
		proxy: appServer(o.FastPath, proxy, nil, h2, errLog, log),
		admin: localServer(admin.Handler(), adminWriteTimeout, errLog)}
	if ls.transparent != nil {
		handler := &Transparent{Proxy: stack.proxy(byHost), Self: listenAddrPorts(ls.proxy, ls.admin, ls.transparent)}
		s.transparent = appServer(false, handler, ConnContext, h2, errLog, log)
	}
	if ls.stats != nil {
		// The pod-IP port: its connections capped, refusals counted.
		capped := newCappedListener(ls.stats, o.StatsMaxConnections)
		metrics.WatchStatsConnections(capped)
		ls.stats = capped
		s.stats = localServer(StatsHandler(reloader, metrics), statsWriteTimeout, errLog)
	}
	return s
}

// serve starts each server on its listener; the channel receives the error
// of any that stops.
func (s *servers) serve(ls *listeners) <-chan error {
	serveErr := make(chan error, 4)
	go func() { serveErr <- s.proxy.Serve(ls.proxy) }()
	go func() { serveErr <- s.admin.Serve(ls.admin) }()
	if s.transparent != nil {
		go func() { serveErr <- s.transparent.Serve(ls.transparent) }()
	}
	if s.stats != nil {
		go func() { serveErr <- s.stats.Serve(ls.stats) }()
	}
	return serveErr
}

// drain stops the servers: readiness goes red, the listeners close, requests
// and tunnels in flight get timeout to finish, and what is left then is closed.
func (s *servers) drain(timeout time.Duration, log *slog.Logger) {
	s.adminAPI.draining.Store(true)
	log.Info("draining", "timeout", timeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.h2.goAway()
	clean := s.proxy.Shutdown(dctx) == nil
	if s.transparent != nil {
		clean = s.transparent.Shutdown(dctx) == nil && clean
	}
	clean = s.forward.tunnels.drain(dctx) && clean
	if !clean {
		s.proxy.Close()
		if s.transparent != nil {
			s.transparent.Close()
		}
		log.Warn("drain timeout reached; closed the connections still open")
	}
	s.upstream.closeIdleConnections()
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	_ = s.admin.Shutdown(actx)
	if s.stats != nil {
		_ = s.stats.Shutdown(actx)
	}
	log.Info("stopped", "clean", clean)
}

// The app-side servers' timeouts: a request head must arrive within
// appReadHeaderTimeout of its first byte; a keep-alive connection may wait
// appIdleTimeout for its next request.
const (
	appReadHeaderTimeout = 30 * time.Second
	appIdleTimeout       = 2 * time.Minute
)

// appServer is the server of an app-facing listener: the fast path in front
// of std, or std serving every connection. Either way h1server accepts the
// connections, so each is watched for a hang-up from the start and closed
// at once by a drain when no request is in flight on it
// (docs/performance.md#the-app-side-server).
// connContext, if set, is net/http.Server's ConnContext. A connection that
// begins with the HTTP/2 preface is served by h2 (docs/sidecar.md#grpc-and-http2).
func appServer(fastPath bool, h http.Handler, connContext func(context.Context, net.Conn) context.Context,
	h2 *appHTTP2, errLog *stdlog.Logger, log *slog.Logger) server {
	std := &http.Server{Handler: h, ConnContext: connContext, ReadHeaderTimeout: appReadHeaderTimeout,
		IdleTimeout: appIdleTimeout, ErrorLog: errLog}
	return &h1server.Server{Handler: h, Fallback: std, HandOffAll: !fastPath,
		ReadHeaderTimeout: appReadHeaderTimeout, IdleTimeout: appIdleTimeout, Log: log,
		HTTP2: h2.srv, HTTP2MaxHeaderBytes: grpcMaxHeaderBytes}
}

// server is what Run needs of an app-side server.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// checkLoopback refuses a proxy address that is not a loopback address: the
// sidecar is the pod's own proxy and must not be reachable from the network.
func checkLoopback(flag, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s %q: must be a loopback address such as 127.0.0.1:15001 or [::1]:15001", flag, addr)
}

func writeReadyFile(path, listen, admin, transparent, stats string) error {
	m := map[string]any{"listen": listen, "admin": admin, "stats": stats, "pid": os.Getpid()}
	if transparent != "" {
		m["transparent"] = transparent
	}
	b, err := json.Marshal(m)
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
