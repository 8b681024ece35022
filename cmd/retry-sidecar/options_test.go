package main

import (
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
)

func TestParseOptions(t *testing.T) {
	tests := map[string]struct {
		args       []string
		wantOK     bool
		wantStderr string
		check      func(t *testing.T, o sidecar.Options)
	}{
		"no flags gives the defaults": {
			wantOK: true,
			check: func(t *testing.T, o sidecar.Options) {
				if o.Listen != "127.0.0.1:15001" || o.LogLevel != slog.LevelInfo || o.DrainTimeout != 20*time.Second || len(o.Sources.PolicyFiles) != 0 ||
					o.StatsMaxConnections != 64 {
					t.Errorf("got %+v", o)
				}
			},
		},
		"--policy-file is repeatable and comma-separated": {
			args: []string{"--policy-file=a.yaml,b.yaml", "--policy-file", "c.yaml", "--log-level=debug"}, wantOK: true,
			check: func(t *testing.T, o sidecar.Options) {
				if !slices.Equal(o.Sources.PolicyFiles, []string{"a.yaml", "b.yaml", "c.yaml"}) || o.LogLevel != slog.LevelDebug {
					t.Errorf("got %+v", o)
				}
			},
		},
		"--http1-upstream-client is on by default, and false turns it off": {
			args: []string{"--http1-upstream-client=false"}, wantOK: true,
			check: func(t *testing.T, o sidecar.Options) {
				if o.HTTP1UpstreamClient || !sidecar.DefaultOptions().HTTP1UpstreamClient {
					t.Errorf("HTTP1UpstreamClient = %v, default %v; want false, true", o.HTTP1UpstreamClient, sidecar.DefaultOptions().HTTP1UpstreamClient)
				}
			},
		},
		"an unknown log level is a usage error": {
			args: []string{"--log-level=loud"}, wantStderr: "retry-sidecar: --log-level: ",
		},
		"a positional argument is a usage error": {
			args: []string{"extra"}, wantStderr: `retry-sidecar: unexpected arguments ["extra"]`,
		},
		"--stats-max-connections sets the stats connection cap": {
			args: []string{"--stats-max-connections=8"}, wantOK: true,
			check: func(t *testing.T, o sidecar.Options) {
				if o.StatsMaxConnections != 8 {
					t.Errorf("StatsMaxConnections = %d, want 8", o.StatsMaxConnections)
				}
			},
		},
		"a stats connection cap below 1 is a usage error": {
			args: []string{"--stats-max-connections=0"}, wantStderr: "retry-sidecar: --stats-max-connections must be at least 1, got 0",
		},
		"a duration without a unit says what a duration looks like": {
			args: []string{"--drain-timeout", "5"}, wantStderr: `invalid value "5" for flag -drain-timeout: "5" is not a duration: give a duration such as 5s, 500ms or 1m30s`,
		},
		"an unknown flag is a usage error": {
			args: []string{"--no-such-flag"}, wantStderr: "flag provided but not defined: -no-such-flag",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stderr strings.Builder
			o, ok, _ := parseOptions(tc.args, io.Discard, &stderr)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (stderr %q)", ok, tc.wantOK, stderr.String())
			}
			if !strings.HasPrefix(stderr.String(), tc.wantStderr) || (tc.wantStderr == "" && stderr.Len() > 0) {
				t.Errorf("stderr %q, want it to start with %q", stderr.String(), tc.wantStderr)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}

func TestUsageListsEveryFlagSubcommandAndEnvironmentVariable(t *testing.T) {
	var usage strings.Builder
	printUsage(&usage)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o, files, level := sidecar.DefaultOptions(), listFlag(nil), "info"
	bindFlags(fs, &o, &files, &level)
	var want []string
	fs.VisitAll(func(f *flag.Flag) {
		if u := usage.String(); !strings.Contains(u, "  -"+f.Name+" ") && !strings.Contains(u, "  -"+f.Name+"\n") {
			t.Errorf("the usage lacks the flag -%s", f.Name)
		}
		want = append(want, f.Usage)
	})
	want = append(want, "retry-sidecar probe URL", "retry-sidecar redirect --ports", "retry-sidecar help", "Examples:\n  retry-sidecar --policy-file",
		tracing.EnvEndpoint, tracing.EnvTracesEndpoint, tracing.EnvProtocol, tracing.EnvTracesProtocol, tracing.EnvSampler, tracing.EnvSamplerArg,
		tracing.EnvServiceName, tracing.EnvSDKDisabled, tracing.EnvTracesExporter, tracing.EnvQueueSize, tracing.EnvBatchSize,
		tracing.EnvScheduleDelay, tracing.EnvExportTimeout, attrvalue.EnvSpanLimit, attrvalue.EnvLimit)
	if len(want) < 20+19 {
		t.Fatalf("only %d flags registered", len(want)-19)
	}
	for _, w := range want {
		if !strings.Contains(usage.String(), w) {
			t.Errorf("the usage lacks %q:\n%s", w, usage.String())
		}
	}
}

func TestHelpPrintsTheUsageOnStdoutAndSucceeds(t *testing.T) {
	var usage strings.Builder
	printUsage(&usage)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--listen=127.0.0.1:0", "-help"}} {
		var stdout, stderr strings.Builder
		_, ok, code := parseOptions(args, &stdout, &stderr)
		if ok || code != 0 || stdout.String() != usage.String() || stderr.Len() != 0 {
			t.Errorf("%q: ok %v, code %d, stdout %d bytes (usage %d), stderr %q; want false, 0, the usage, nothing",
				args, ok, code, stdout.Len(), usage.Len(), stderr.String())
		}
	}
}
