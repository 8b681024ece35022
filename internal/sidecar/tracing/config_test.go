package tracing

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestParseTraceparent(t *testing.T) {
	for name, tc := range map[string]struct {
		in      string
		valid   bool
		sampled bool
	}{
		"a sampled version 00 header":      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, true},
		"an unsampled one":                 {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		"unknown flags are ignored":        {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", true, true},
		"a later version with more fields": {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", true, true},
		"version 00 with more fields":      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", false, false},
		"version ff":                       {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		"an all-zero trace id":             {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		"an all-zero span id":              {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		"upper-case hex":                   {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, false},
		"too short":                        {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", false, false},
		"a missing dash":                   {"00-4bf92f3577b34da6a3ce929d0e0e4736000f067aa0ba902b7-01", false, false},
		"empty":                            {"", false, false},
	} {
		t.Run(name, func(t *testing.T) {
			sc := ParseTraceparent(tc.in)
			if sc.IsValid() != tc.valid || sc.IsSampled() != tc.sampled {
				t.Errorf("valid %v sampled %v, want %v %v", sc.IsValid(), sc.IsSampled(), tc.valid, tc.sampled)
			}
			if tc.valid && !sc.IsRemote() {
				t.Error("the app's span context is not remote")
			}
		})
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, s string) {
		sc := ParseTraceparent(s)
		if sc.IsValid() && s[:2] == "00" && sc.TraceID().String() != s[3:35] {
			t.Fatalf("%q: trace id %s", s, sc.TraceID())
		}
	})
}

func TestSampler(t *testing.T) {
	sampled := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	unsampled := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	// The SDK's ratio test on this trace id: its low 8 bytes >> 1 against ratio·2^63.
	lowID := ParseTraceparent("00-00000000000000000000000000000001-00f067aa0ba902b7-00")
	for name, tc := range map[string]struct {
		sampler, arg                    string
		none, sampledParent, unsampledP bool
	}{
		"unset is parentbased_always_on":    {"", "", true, true, false},
		"always_on":                         {"always_on", "", true, true, true},
		"always_off":                        {"always_off", "", false, false, false},
		"parentbased_always_off":            {"parentbased_always_off", "", false, true, false},
		"parentbased_traceidratio 0":        {"parentbased_traceidratio", "0", false, true, false},
		"parentbased_traceidratio unset":    {"parentbased_traceidratio", "", true, true, false},
		"traceidratio 0 ignores the parent": {"traceidratio", "0", false, false, false},
		"traceidratio 1 ignores the parent": {"traceidratio", "1", true, true, true},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := ParseSampler(tc.sampler, tc.arg)
			if err != nil {
				t.Fatal(err)
			}
			got := [3]bool{s.Sample(trace.SpanContext{}), s.Sample(sampled), s.Sample(unsampled)}
			if want := [3]bool{tc.none, tc.sampledParent, tc.unsampledP}; got != want {
				t.Errorf("no parent, sampled parent, unsampled parent: %v, want %v", got, want)
			}
		})
	}
	s, _ := ParseSampler("traceidratio", "0.5")
	if !s.Sample(lowID) {
		t.Error("traceidratio 0.5 drops a trace id whose low half is 1; the SDK keeps it")
	}
}

func TestFromEnv(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		enabled bool
		err     string
	}{
		"no endpoint: off":               {map[string]string{}, false, ""},
		"an endpoint: on":                {map[string]string{EnvEndpoint: "http://c:4318"}, true, ""},
		"a traces endpoint: on":          {map[string]string{EnvTracesEndpoint: "http://c:4318/v1/traces"}, true, ""},
		"OTEL_SDK_DISABLED=true: off":    {map[string]string{EnvEndpoint: "http://c:4318", EnvSDKDisabled: "true"}, false, ""},
		"OTEL_TRACES_EXPORTER=none: off": {map[string]string{EnvEndpoint: "http://c:4318", EnvTracesExporter: "none"}, false, ""},
		"http/json is refused":           {map[string]string{EnvProtocol: "http/json"}, false, `OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is not supported: use http/protobuf or grpc`},
		"an unknown sampler is refused":  {map[string]string{EnvSampler: "jaeger_remote"}, false, `OTEL_TRACES_SAMPLER: "jaeger_remote" is not supported: use one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio`},
		"a ratio above 1 is refused":     {map[string]string{EnvSampler: "parentbased_traceidratio", EnvSamplerArg: "1.5"}, false, `OTEL_TRACES_SAMPLER_ARG: "1.5" must be a number from 0 to 1`},
		"a queue size that is no number": {map[string]string{EnvQueueSize: "lots"}, false, `OTEL_BSP_MAX_QUEUE_SIZE: "lots" must be a positive integer`},
		"an endpoint without a scheme is refused": {map[string]string{EnvEndpoint: "127.0.0.1:4318"}, false,
			`OTEL_EXPORTER_OTLP_ENDPOINT: "127.0.0.1:4318" is not a URL with scheme http or https: want e.g. http://127.0.0.1:4318`},
		"a traces endpoint without a host is refused, its credentials and query cut": {map[string]string{EnvTracesEndpoint: "user:s3cret@c:4318/v1/traces?token=s3cret"}, false,
			`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "…@c:4318/v1/traces" is not a URL with scheme http or https: want e.g. http://127.0.0.1:4318`},
		"an endpoint without a scheme is not judged while tracing is off": {map[string]string{EnvEndpoint: "127.0.0.1:4318", EnvSDKDisabled: "true"}, false, ""},
		"an unlimited attribute value is refused": {map[string]string{EnvEndpoint: "http://c:4318", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "-1"}, false,
			`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: "-1" must be a positive integer (bytes)`},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := FromEnv(func(k string) string { return tc.env[k] })
			if got := errString(err); got != tc.err {
				t.Fatalf("error %q, want %q", got, tc.err)
			}
			if err == nil && c.Enabled != tc.enabled {
				t.Errorf("Enabled %v, want %v", c.Enabled, tc.enabled)
			}
		})
	}
}

func TestConfigLogAttrsSayWhereSpansGoWithoutCredentials(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no endpoint":          {map[string]string{}, "[enabled false reason OTEL_EXPORTER_OTLP_ENDPOINT is not set]"},
		"OTEL_SDK_DISABLED":    {map[string]string{EnvEndpoint: "http://c:4318", EnvSDKDisabled: "TRUE"}, "[enabled false reason OTEL_SDK_DISABLED=true]"},
		"OTEL_TRACES_EXPORTER": {map[string]string{EnvEndpoint: "http://c:4318", EnvTracesExporter: "none"}, "[enabled false reason OTEL_TRACES_EXPORTER=none]"},
		"an endpoint with credentials and a query": {map[string]string{EnvEndpoint: "https://u:s3cret@c:4318/otlp?k=s3cret", EnvProtocol: "grpc"},
			"[enabled true endpoint https://c:4318/otlp protocol grpc]"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := FromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(c.LogAttrs()); got != tc.want {
				t.Errorf("LogAttrs %s, want %s", got, tc.want)
			}
		})
	}
}

// Unset, the bounds are 256 bytes per value and 8 MiB of queued spans; the
// attribute value limit follows the OpenTelemetry variables.
func TestFromEnvBounds(t *testing.T) {
	for name, tc := range map[string]struct {
		env               map[string]string
		limit, queueBytes int
	}{
		"the defaults":                      {map[string]string{}, 256, 8 << 20},
		"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": {map[string]string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1024"}, 1024, 8 << 20},
		"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT first": {map[string]string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1024",
			"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "64"}, 64, 8 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := FromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if c.ValueLimit != tc.limit || c.Queue.Bytes != tc.queueBytes {
				t.Errorf("ValueLimit %d, Queue.Bytes %d; want %d, %d", c.ValueLimit, c.Queue.Bytes, tc.limit, tc.queueBytes)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
