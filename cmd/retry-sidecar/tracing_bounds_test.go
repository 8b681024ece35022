package main_test

import (
	"bufio"
	"cmp"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
)

// One upstream answering a Server header that is not UTF-8 costs no span:
// every span of the batch arrives, the bad bytes replaced, and every value
// taken from the network is cut to 256 bytes without splitting a character
// (docs/observability.md#what-a-span-holds).
func TestTracingOneBadHeaderCostsNoOtherSpan(t *testing.T) {
	t.Parallel()
	col := startCollector(t, "http/protobuf", nil)
	// One export for the whole test: the bad span shares its batch.
	env := append(col.env, "OTEL_BSP_SCHEDULE_DELAY=1000")
	long := strings.Repeat("é", 300) // 600 bytes
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/evil":
			w.Header().Set("Server", "evil\xff")
		case "/long":
			w.Header().Set("Server", "x"+long)
			w.Header().Set("Via", long)
		}
		w.WriteHeader(http.StatusOK)
	})
	s := startSidecarEnv(t, env, "--policy-file="+policyFile(t, up.host(), fields()...))
	for _, path := range []string{"/a", "/b", "/evil", "/long", "/c"} {
		assertOutcome(t, s.get(up.url(path)), 200, "success", "1")
	}
	longMethod := "PURGE" + strings.Repeat("X", 300)
	req, _ := http.NewRequest(longMethod, up.url("/method"), nil)
	if r := s.do(req); r.status != 200 {
		t.Fatalf("the long method got %d, want 200", r.status)
	}

	spans := col.waitSpans(t, 12)
	if len(spans) != 12 {
		t.Fatalf("the collector received %d spans, want 12 (6 requests, a SERVER and a CLIENT span each)", len(spans))
	}
	cut := strings.Repeat("é", 128) // 256 bytes
	wantServer := map[string][]string{"/evil": {"evil\uFFFD"}, "/long": {"x" + strings.Repeat("é", 127)}}
	var clients []otlpreceiver.Span
	for _, sp := range spans {
		if len(sp.GetName()) > 256 {
			t.Errorf("a %s span is named with %d bytes, want at most 256", sp.GetKind(), len(sp.GetName()))
		}
		if m := stringsOf(sp.GetAttributes(), "http.request.method"); len(m) != 1 || len(m[0]) > 256 {
			t.Errorf("a %s span's http.request.method %.40q, want one value of at most 256 bytes", sp.GetKind(), m)
		}
		if sp.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
			clients = append(clients, sp)
		}
	}
	slices.SortFunc(clients, func(a, b otlpreceiver.Span) int {
		return cmp.Compare(a.GetStartTimeUnixNano(), b.GetStartTimeUnixNano())
	})
	for i, path := range []string{"/a", "/b", "/evil", "/long", "/c", "/method"} {
		attrs := clients[i].GetAttributes()
		if got, want := stringsOf(attrs, "http.response.header.server"), wantServer[path]; !slices.Equal(got, want) {
			t.Errorf("%s: http.response.header.server %.60q, want %.60q", path, got, want)
		}
		wantVia := []string(nil)
		if path == "/long" {
			wantVia = []string{cut}
		}
		if got := stringsOf(attrs, "http.response.header.via"); !slices.Equal(got, wantVia) {
			t.Errorf("%s: http.response.header.via %.60q, want %.60q (256 bytes, no character split)", path, got, wantVia)
		}
	}
	if got, want := stringsOf(clients[5].GetAttributes(), "http.request.method"), []string{longMethod[:256]}; !slices.Equal(got, want) {
		t.Errorf("the long method's CLIENT span: http.request.method %.40q, want its first 256 bytes", got)
	}
	if got := s.metric(`retry_sidecar_trace_spans_dropped_total{reason="export_failed"}`); got != 0 {
		t.Errorf("export_failed = %v, want 0", got)
	}
}

// stringsOf are the string values of attribute key (one for a string, each
// element of an array), nil when it is absent.
func stringsOf(kvs []*commonpb.KeyValue, key string) []string {
	for _, kv := range kvs {
		if kv.GetKey() != key {
			continue
		}
		if a := kv.GetValue().GetArrayValue(); a != nil {
			var out []string
			for _, v := range a.GetValues() {
				out = append(out, v.GetStringValue())
			}
			return out
		}
		return []string{kv.GetValue().GetStringValue()}
	}
	return nil
}

// A collector that accepts connections and never answers, and an upstream
// answering 300 requests with a 900 KB Server header, cost the sidecar a
// bounded amount of memory: the values are cut to 256 bytes, and with the cut
// raised to 1 MiB the export queue's 8 MiB bound holds, the spans past it
// dropped as queue_full. Before both bounds the sidecar peaked at 523-617 MiB.
//
// The bounds: with tracing off this run peaks at 48-54 MiB (the headers in
// flight). Cut values add nothing measurable (48-54 MiB): 80 MiB. The raised
// cut adds the 8 MiB queue and one batch's encoding (1 MiB), tripled by the
// GC's headroom (the sidecar's GOGC is 200), about 27 MiB (77-82 MiB
// measured): 100 MiB.
func TestTracingBlackHoledCollectorCostsBoundedMemory(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env       []string
		wantFull  bool
		maxPeakMB int
	}{
		"values cut to 256 bytes": {maxPeakMB: 80},
		"the cut raised to 1 MiB: the queue's 8 MiB bound": {
			env: []string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=1048576"}, wantFull: true, maxPeakMB: 100},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hole := blackHole(t)
			env := append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + hole}, tc.env...)
			server := strings.Repeat("s", 900<<10)
			up := newUpstream(t, status(200, "Server", server))
			s := startSidecarEnv(t, env, "--policy-file="+policyFile(t, up.host(), fields()...))
			sendConcurrently(t, s, up.url("/big"), 300, 2)
			time.Sleep(time.Second) // the exports started, and block on the collector
			peak := peakRSS(t, s.cmd.Process.Pid)
			full := s.metric(`retry_sidecar_trace_spans_dropped_total{reason="queue_full"}`)
			t.Logf("%s: sidecar peak RSS %d MiB, %v spans dropped as queue_full", name, peak>>20, full)
			if peak > int64(tc.maxPeakMB)<<20 {
				t.Errorf("sidecar peak RSS %d MiB, want under %d MiB", peak>>20, tc.maxPeakMB)
			}
			if tc.wantFull && full <= 0 {
				t.Errorf("no span dropped as queue_full, want the spans past 8 MiB dropped")
			}
		})
	}
}

// blackHole is a collector address that accepts connections and never reads
// or answers.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// sendConcurrently sends n GETs of rawURL through s, workers at a time, and
// fails unless each is answered 200.
func sendConcurrently(t *testing.T, s *sidecar, rawURL string, n, workers int) {
	t.Helper()
	proxy := &url.URL{Scheme: "http", Host: s.proxy}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
		MaxIdleConnsPerHost: workers, MaxResponseHeaderBytes: 2 << 20}}
	defer client.CloseIdleConnections()
	jobs := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range jobs {
				resp, err := client.Get(rawURL)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				errs <- err
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("GET %s: %v", rawURL, err)
		}
	}
}

// peakRSS is the peak resident set size of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
