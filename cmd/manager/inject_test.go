package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// TestSidecarImagePullSecretsFlag: --sidecar-image-pull-secrets becomes the
// injector's list of pull secrets, and a name that cannot be a Secret's is
// refused naming the flag.
func TestSidecarImagePullSecretsFlag(t *testing.T) {
	tests := map[string]struct {
		flag    string
		want    []string
		wantErr string
	}{
		"empty adds none":                            {flag: "", want: nil},
		"names are split on commas and trimmed":      {flag: "registry-a, registry-b ,", want: []string{"registry-a", "registry-b"}},
		"an upper-case name is not a Secret's":       {flag: "Registry", wantErr: `--sidecar-image-pull-secrets: "Registry" is not a Secret name`},
		"a name with a slash is not a Secret's name": {flag: "ns/registry", wantErr: `--sidecar-image-pull-secrets: "ns/registry" is not a Secret name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := options{sidecarImage: "retry.dev/retry-sidecar:dev", sidecarPullSecrets: tc.flag}
			cfg, ok := injectConfigOrRefusal(t, o, tc.wantErr)
			if !ok {
				return
			}
			if !slices.Equal(cfg.ImagePullSecrets, tc.want) {
				t.Errorf("ImagePullSecrets = %q, want %q", cfg.ImagePullSecrets, tc.want)
			}
		})
	}
}

// TestTracingFlags: --tracing-otlp-endpoint and --tracing-sampling-ratio
// become the injector's tracing settings; a ratio outside 0..1 or an endpoint
// that is no http(s) URL is refused naming the flag.
func TestTracingFlags(t *testing.T) {
	tests := map[string]struct {
		endpoint string
		ratio    float64
		wantErr  string
	}{
		"no endpoint leaves tracing off":    {endpoint: "", ratio: 1},
		"an endpoint and a ratio are taken": {endpoint: "http://otel-collector.observability.svc:4318", ratio: 0.1},
		"a ratio above 1 is refused":        {endpoint: "http://c:4318", ratio: 1.5, wantErr: "--tracing-sampling-ratio: 1.5 is not a number from 0 to 1"},
		"a negative ratio is refused":       {ratio: -0.1, wantErr: "--tracing-sampling-ratio: -0.1 is not a number from 0 to 1"},
		"a host without a scheme is refused": {endpoint: "otel-collector:4318", ratio: 1,
			wantErr: `--tracing-otlp-endpoint: "otel-collector:4318" is not an http:// or https:// URL with a host`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := options{sidecarImage: "retry.dev/retry-sidecar:dev", tracingEndpoint: tc.endpoint, tracingSamplingRatio: tc.ratio}
			cfg, ok := injectConfigOrRefusal(t, o, tc.wantErr)
			if !ok {
				return
			}
			if cfg.Tracing.OTLPEndpoint != tc.endpoint || cfg.Tracing.SamplingRatio != tc.ratio {
				t.Errorf("Tracing = %+v, want endpoint %q ratio %v", cfg.Tracing, tc.endpoint, tc.ratio)
			}
		})
	}
}

// injectConfigOrRefusal returns o's injector settings and true; with wantErr
// set it checks instead that o is refused with an error starting wantErr, and
// returns false.
func injectConfigOrRefusal(t *testing.T, o options, wantErr string) (podinject.Config, bool) {
	t.Helper()
	cfg, err := o.injectConfig()
	if wantErr != "" {
		if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Fatalf("injectConfig() error = %v, want one starting %q", err, wantErr)
		}
		return cfg, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg, true
}
