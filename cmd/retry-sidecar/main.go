// Command retry-sidecar is the forward HTTP proxy that enforces RetryPolicies
// next to each application container (docs/sidecar.md). Point an application at it with
// HTTP_PROXY=http://127.0.0.1:15001; see the README, "The sidecar".
//
//	retry-sidecar --policy-file my-policy.yaml
//	retry-sidecar --config-dir /etc/retry-sidecar/policies --pod-labels /etc/retry-sidecar/podinfo/labels \
//	              --api-credentials-dir /var/run/secrets/retry.dev/serviceaccount
//	retry-sidecar probe http://127.0.0.1:15020/readyz   (the kubelet's exec probe)
//	retry-sidecar redirect --ports 80,8080 --to 15006 --exclude-uid 65532   (transparent interception's init container)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
)

// listFlag is a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(runProbe(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "redirect" {
		os.Exit(runRedirect(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "help" {
		printUsage(os.Stdout)
		os.Exit(0)
	}
	o, ok, code := parseOptions(os.Args[1:], os.Stdout, os.Stderr)
	if !ok {
		os.Exit(code)
	}

	// The proxy allocates a few KiB per request and its live heap is tiny, so the
	// default GOGC=100 collects very often; 200 trades a few MiB of RSS (well within
	// the 50 MiB budget, and GOMEMLIMIT from the injector still caps it) for CPU.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := sidecar.Run(ctx, o)
	stop()
	if err != nil {
		// One JSON line like every other log line, so a log pipeline keeps it.
		slog.New(sidecar.NewLogHandler(os.Stderr, slog.LevelInfo)).Error("retry-sidecar cannot start", "error", err.Error())
		os.Exit(1)
	}
}

// parseOptions parses the proxy's command line. With -h or --help it prints
// the usage to stdout and reports false with exit code 0; on a usage error it
// prints the error to stderr and reports false with exit code 2.
func parseOptions(args []string, stdout, stderr io.Writer) (o sidecar.Options, ok bool, code int) {
	o = sidecar.DefaultOptions()
	fs := flag.NewFlagSet("retry-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	var files listFlag
	logLevel := "info"
	bindFlags(fs, &o, &files, &logLevel)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return o, false, 0
	} else if err != nil {
		fmt.Fprintln(stderr, "Run retry-sidecar --help for the flags.")
		return o, false, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "retry-sidecar: unexpected arguments %q\n", fs.Args())
		return o, false, 2
	}
	o.Sources.PolicyFiles = files
	o.Sources.Namespace = os.Getenv("POD_NAMESPACE") // which routes apply (docs/gateway-api.md#hosts)
	if o.StatsMaxConnections < 1 {
		fmt.Fprintf(stderr, "retry-sidecar: --stats-max-connections must be at least 1, got %d\n", o.StatsMaxConnections)
		return o, false, 2
	}
	lvl, err := sidecar.ParseLevel(logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "retry-sidecar: --log-level: %v\n", err)
		return o, false, 2
	}
	o.LogLevel = lvl
	return o, true, 0
}

const usageHead = `retry-sidecar: the forward HTTP proxy that applies RetryPolicies to an
application's outbound calls (docs/sidecar.md). Point the application at it
with HTTP_PROXY=http://127.0.0.1:15001.

Usage:
  retry-sidecar [flags]                 serve (the webhook injects it with --config-dir)
  retry-sidecar probe URL               the kubelet's exec probe: exit 0 when URL answers 200
  retry-sidecar redirect --ports P,... --to PORT --exclude-uid UID
                                        transparent interception's init container (nftables)
  retry-sidecar help                    this text (also -h, --help)

Examples:
  retry-sidecar --policy-file my-policy.yaml
  retry-sidecar --policy-file partner.yaml --quota-credentials-file redis.credentials
  retry-sidecar --config-dir /etc/retry-sidecar/policies --pod-labels /etc/retry-sidecar/podinfo/labels
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 retry-sidecar --policy-file my-policy.yaml

Flags:
`

// usageEnv are the environment variables the sidecar reads, each with what
// it does (docs/observability.md#tracing).
var usageEnv = [][2]string{
	{tracing.EnvEndpoint, "OTLP endpoint (http:// or https:// URL); tracing is on when it is set"},
	{tracing.EnvTracesEndpoint, "OTLP endpoint of traces, before " + tracing.EnvEndpoint},
	{tracing.EnvProtocol + ", " + tracing.EnvTracesProtocol, tracing.ProtocolHTTP + " (default) or " + tracing.ProtocolGRPC},
	{tracing.EnvSDKDisabled + "=true, " + tracing.EnvTracesExporter + "=none", "tracing off"},
	{tracing.EnvSampler + ", " + tracing.EnvSamplerArg, "sampler (default parentbased_always_on) and its ratio"},
	{tracing.EnvServiceName + ", OTEL_RESOURCE_ATTRIBUTES", "the spans' resource"},
	{"OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE", "read by the OpenTelemetry SDK (never logged)"},
	{tracing.EnvQueueSize + ", " + tracing.EnvBatchSize + ", " + tracing.EnvScheduleDelay + ", " + tracing.EnvExportTimeout, "the export queue"},
	{attrvalue.EnvSpanLimit + ", " + attrvalue.EnvLimit, "bytes of an attribute value (default 256)"},
	{"GOMEMLIMIT, GOGC", "Go's memory limit (the injector sets it) and GC target (default 200 here)"},
}

// printUsage writes the whole usage: what the sidecar is, its subcommands,
// examples, every flag and the environment variables it reads.
func printUsage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	fs := flag.NewFlagSet("retry-sidecar", flag.ContinueOnError)
	o, files, logLevel := sidecar.DefaultOptions(), listFlag(nil), "info"
	bindFlags(fs, &o, &files, &logLevel)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nEnvironment:\n")
	for _, e := range usageEnv {
		fmt.Fprintf(w, "  %s\n    \t%s\n", e[0], e[1])
	}
}

// bindFlags binds the proxy's flags to o, files (--policy-file) and logLevel,
// with o's values as the defaults.
func bindFlags(fs *flag.FlagSet, o *sidecar.Options, files *listFlag, logLevel *string) {
	fs.StringVar(&o.Listen, "listen", o.Listen, "forward proxy address (loopback only)")
	fs.StringVar(&o.TransparentListen, "transparent-listen", "", "serve connections redirected by retry-sidecar redirect here (loopback only, e.g. 127.0.0.1:15006); off when empty")
	fs.StringVar(&o.AdminListen, "admin-listen", o.AdminListen, "address of /healthz, /readyz, /metrics and /config")
	fs.StringVar(&o.StatsListen, "stats-listen", o.StatsListen, "pod-IP address of /metrics and /config (read-only); empty: not served")
	fs.IntVar(&o.StatsMaxConnections, "stats-max-connections", o.StatsMaxConnections, "stats connections open at once; more are reset at once and counted in retry_sidecar_stats_connections_refused_total")
	fs.StringVar(&o.API.Dir, "api-credentials-dir", "", "projected service-account token, ca.crt and namespace: watch retry-policies through the API server (docs/fleet.md)")
	fs.StringVar(&o.API.Server, "api-server", "", "API server URL for --api-credentials-dir; empty: from KUBERNETES_SERVICE_HOST/PORT")
	fs.StringVar(&o.Sources.ConfigDir, "config-dir", "", "mounted retry-policies ConfigMap directory (reads policies.json; watched)")
	fs.Var(files, "policy-file", "RetryPolicy YAML file (repeatable or comma-separated; watched)")
	fs.StringVar(&o.Sources.QuotaCredentials, "quota-credentials-file", "", "file with \"username: NAME\" and \"password: SECRET\" lines: the store credentials of the SharedQuotas in --policy-file (watched; never logged)")
	fs.StringVar(&o.Sources.PodLabels, "pod-labels", "", "downward API labels file selecting the policies that apply (watched); without it every policy applies")
	sidecar.DurationVar(fs, &o.DrainTimeout, "drain-timeout", o.DrainTimeout, "on SIGTERM, how long requests in flight may take to finish")
	fs.StringVar(logLevel, "log-level", *logLevel, "debug (every attempt and outcome), info (retries and non-success outcomes), warn or error")
	fs.IntVar(&o.MaxIdleConns, "max-idle-conns", o.MaxIdleConns, "idle upstream keep-alive connections, all hosts")
	fs.IntVar(&o.MaxIdleConnsPerHost, "max-idle-conns-per-host", o.MaxIdleConnsPerHost, "idle upstream keep-alive connections per host")
	fs.IntVar(&o.MaxConnsPerHost, "max-conns-per-host", o.MaxConnsPerHost, "upstream connections per host, 0 = unlimited")
	sidecar.DurationVar(fs, &o.IdleConnTimeout, "idle-conn-timeout", o.IdleConnTimeout, "close idle upstream connections after this long")
	sidecar.DurationVar(fs, &o.DialTimeout, "dial-timeout", o.DialTimeout, "upstream connect timeout")
	fs.Int64Var(&o.MaxReplayMemory, "max-replay-memory", 0, "bytes all request replay buffers may hold at once (0: a quarter of GOMEMLIMIT, or 32 MiB without one); a body that does not fit is sent once, never replayed")
	fs.IntVar(&o.TracingQueueBytes, "tracing-queue-bytes", 0, "bytes of spans the trace export queue may hold, waiting or in an export not answered yet (0: 8 MiB); a span that does not fit is dropped, counted in retry_sidecar_trace_spans_dropped_total{reason=\"queue_full\"}")
	sidecar.DurationVar(fs, &o.ReloadDebounce, "reload-debounce", o.ReloadDebounce, "wait this long after a file event before reloading")
	sidecar.DurationVar(fs, &o.ResyncInterval, "resync-interval", o.ResyncInterval, "re-read the configuration this often even without file events")
	fs.StringVar(&o.ReadyFile, "ready-file", "", "write {\"listen\",\"admin\",\"transparent\",\"stats\",\"pid\"} as JSON here once listening (useful with port 0)")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", false, "serve /debug/pprof/ on the admin address")
	fs.BoolVar(&o.FastPath, "http1-fast-path", o.FastPath, "serve the app's plain HTTP/1.1 requests without net/http.Server's per-request work; anything else is still served by net/http.Server (docs/performance.md#the-app-side-server)")
	fs.BoolVar(&o.HTTP1UpstreamClient, "http1-upstream-client", o.HTTP1UpstreamClient, "send plain HTTP/1.1 attempts with the sidecar's own client; false: with net/http's Transport (docs/performance.md#the-upstream-client)")
}
