// Package tracing is the retry-sidecar's OpenTelemetry export
// (docs/observability.md#tracing): configured only by the standard OTEL_*
// environment variables, off unless an OTLP endpoint is set, sampling decided
// before anything is allocated, spans exported over OTLP (HTTP/protobuf or
// gRPC) from a bounded queue that never blocks a request.
package tracing

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
	"github.com/retrydev/retry-operator/pkg/retryotel"
)

// The environment variables read here; every other OTEL_EXPORTER_OTLP_*
// variable (headers, timeout, compression, certificates) and
// OTEL_RESOURCE_ATTRIBUTES are read by the OpenTelemetry SDK itself.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvSampler        = "OTEL_TRACES_SAMPLER"
	EnvSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvQueueSize      = "OTEL_BSP_MAX_QUEUE_SIZE"
	EnvBatchSize      = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
	EnvScheduleDelay  = "OTEL_BSP_SCHEDULE_DELAY"
	EnvExportTimeout  = "OTEL_BSP_EXPORT_TIMEOUT"
)

// The protocols of OTEL_EXPORTER_OTLP_PROTOCOL that the sidecar speaks.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// DefaultQueueSize is the export queue's length unless OTEL_BSP_MAX_QUEUE_SIZE
// sets it: four times the SDK's 2048, so a second of 5,000 sampled requests/s
// (two spans each) rides out an export that takes 0.8 s
// (docs/observability.md#cost).
const DefaultQueueSize = 8192

// DefaultQueueBytes bounds the bytes of the spans the export queue holds
// (waiting, or in an export the collector has not answered) unless
// --tracing-queue-bytes sets another: 8192 of the sidecar's spans weigh about
// 6.5 MiB (spanSize), so the bound binds only when spans carry long values.
const DefaultQueueBytes = 8 << 20

// Config is what the environment asks for.
type Config struct {
	// Enabled: an OTLP endpoint is set, and neither OTEL_SDK_DISABLED=true nor
	// OTEL_TRACES_EXPORTER=none.
	Enabled  bool
	Protocol string
	// Endpoint is where spans go, as the start log line shows it: scheme,
	// host and path, without credentials or query.
	Endpoint string
	// Off says why tracing is off, "" when it is on.
	Off     string
	Sampler Sampler
	Queue   QueueConfig
	// ValueLimit is the bytes an attribute value taken from the network is
	// cut to (attrvalue.LimitFromEnv).
	ValueLimit int
}

// QueueConfig bounds the export queue (the OTEL_BSP_* variables, with the
// SDK's defaults).
type QueueConfig struct {
	Size          int           // spans waiting at most; more are dropped
	Bytes         int           // spanSize of the spans held at most (0: DefaultQueueBytes); more are dropped
	BatchSize     int           // spans per export at most
	ScheduleDelay time.Duration // a partial batch waits at most this long
	ExportTimeout time.Duration
}

// checkEndpoint holds an OTLP endpoint to what both exporters need, a URL
// with scheme http or https and a host (the SDK would otherwise take
// "127.0.0.1:4318" as a scheme and a path, and send nowhere), and returns it
// without credentials or query, for the start log line.
func checkEndpoint(name, v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: %q is not a URL with scheme http or https: want e.g. http://127.0.0.1:4318", name, redact(v))
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String(), nil
}

// redact cuts what may be a secret out of an endpoint that is not a URL:
// everything up to an "@" and from a "?".
func redact(v string) string {
	v, _, _ = strings.Cut(v, "?")
	if i := strings.LastIndex(v, "@"); i >= 0 {
		v = "…" + v[i:]
	}
	return v
}

// LogAttrs are the attributes of the start log line that says whether
// tracing is on and where spans go, or why it is off.
func (c Config) LogAttrs() []any {
	if !c.Enabled {
		return []any{"enabled", false, "reason", c.Off}
	}
	return []any{"enabled", true, "endpoint", c.Endpoint, "protocol", c.Protocol}
}

// FromEnv reads the configuration through getenv (os.Getenv). Errors name the
// variable and its allowed values.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	endpointVar, endpoint := EnvTracesEndpoint, strings.TrimSpace(getenv(EnvTracesEndpoint))
	if endpoint == "" {
		endpointVar, endpoint = EnvEndpoint, strings.TrimSpace(getenv(EnvEndpoint))
	}
	switch {
	case endpoint == "":
		c.Off = EnvEndpoint + " is not set"
	case strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true"):
		c.Off = EnvSDKDisabled + "=true"
	case strings.TrimSpace(getenv(EnvTracesExporter)) == "none":
		c.Off = EnvTracesExporter + "=none"
	default:
		c.Enabled = true
		var err error
		if c.Endpoint, err = checkEndpoint(endpointVar, endpoint); err != nil {
			return c, err
		}
	}
	c.Protocol = strings.TrimSpace(getenv(EnvTracesProtocol))
	if c.Protocol == "" {
		c.Protocol = strings.TrimSpace(getenv(EnvProtocol))
	}
	switch c.Protocol {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return c, fmt.Errorf("%s: %q is not supported: use %s or %s", EnvProtocol, c.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	s, err := ParseSampler(getenv(EnvSampler), getenv(EnvSamplerArg))
	if err != nil {
		return c, err
	}
	c.Sampler = s
	if c.ValueLimit, err = attrvalue.LimitFromEnv(getenv, retryotel.DefaultValueLimit); err != nil {
		return c, err
	}
	q := QueueConfig{Size: DefaultQueueSize, Bytes: DefaultQueueBytes, BatchSize: 512, ScheduleDelay: 5 * time.Second, ExportTimeout: 30 * time.Second}
	for _, v := range []struct {
		name string
		n    *int
		d    *time.Duration
	}{
		{EnvQueueSize, &q.Size, nil}, {EnvBatchSize, &q.BatchSize, nil},
		{EnvScheduleDelay, nil, &q.ScheduleDelay}, {EnvExportTimeout, nil, &q.ExportTimeout},
	} {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("%s: %q must be a positive integer", v.name, s)
		}
		if v.n != nil {
			*v.n = n
		} else {
			*v.d = time.Duration(n) * time.Millisecond
		}
	}
	q.BatchSize = min(q.BatchSize, q.Size)
	c.Queue = q
	return c, nil
}
