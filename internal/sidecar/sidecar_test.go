package sidecar

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

func TestRemoveHopByHop(t *testing.T) {
	tests := map[string]struct {
		in, want http.Header
	}{
		"the RFC 9110 list and the fields Connection names are removed": {
			in: http.Header{"Connection": {"close, X-Trace-Hop", "x-other"}, "X-Trace-Hop": {"1"}, "X-Other": {"2"},
				"Keep-Alive": {"5"}, "Proxy-Connection": {"keep-alive"}, "Te": {"trailers"}, "Transfer-Encoding": {"chunked"},
				"Upgrade": {"h2c"}, "Proxy-Authorization": {"Basic x"}, "Proxy-Authenticate": {"Basic"}, "Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		"end-to-end fields are kept": {
			in:   http.Header{"Authorization": {"Bearer x"}, "Trailer": {"X-Sum"}, "Idempotency-Key": {"k"}},
			want: http.Header{"Authorization": {"Bearer x"}, "Trailer": {"X-Sum"}, "Idempotency-Key": {"k"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if !hasHopByHop(tc.in) && len(tc.in) != len(tc.want) {
				t.Fatal("hasHopByHop missed a hop-by-hop field")
			}
			removeHopByHop(tc.in)
			if !reflect.DeepEqual(tc.in, tc.want) {
				t.Fatalf("got %v, want %v", tc.in, tc.want)
			}
		})
	}
}

func TestCopyEndToEnd(t *testing.T) {
	src := http.Header{"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
		"Trailer": {"X-Sum"}, "Content-Length": {"2"}, "Retry-After": {"120"}}
	dst := http.Header{}
	copyEndToEnd(dst, src)
	want := http.Header{"Content-Length": {"2"}, "Retry-After": {"120"}}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %v, want %v", dst, want)
	}
	plain := http.Header{"Connection": {"keep-alive"}, "Content-Type": {"text/plain"}}
	if n := testing.AllocsPerRun(100, func() { copyEndToEnd(http.Header{}, plain) }); n > 1 {
		t.Errorf("copyEndToEnd allocates %v times for a plain response; want only the map", n)
	}
}

func TestReloaderKeepsTheOldConfigOnError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.yaml")
	os.WriteFile(p, []byte(policysettest.PolicyYAML("a.example", "")), 0o644)
	var logs bytes.Buffer
	m := NewMetrics()
	r := config.NewReloader(config.Sources{PolicyFiles: []string{p}}, slog.New(slog.NewJSONHandler(&logs, nil)), m)
	if err := r.Reload(); err != nil || !r.Ready() {
		t.Fatalf("first load: %v ready %v", err, r.Ready())
	}
	first := r.Current()
	if err := r.Reload(); err != nil || r.Current() != first || value(m.reloads) != 1 {
		t.Fatalf("an unchanged source must not reload (err %v, reloads %v)", err, value(m.reloads))
	}
	os.WriteFile(p, []byte("kind: Nonsense\n"), 0o644)
	if err := r.Reload(); err == nil {
		t.Fatal("a broken file was accepted")
	}
	_ = r.Reload() // the same broken content is reported once
	if r.Current() != first || !r.Ready() || value(m.reloadErrors) != 1 {
		t.Fatalf("after a refused reload: same config %v, ready %v, errors %v", r.Current() == first, r.Ready(), value(m.reloadErrors))
	}
	req := httptest.NewRequest("GET", "http://a.example/x", nil)
	if pol := byURL.route(r)(req); pol == nil || pol.Name() != "up" {
		t.Fatalf("route after a refused reload: %v", pol)
	}
}

func TestMetricsObserve(t *testing.T) {
	m := NewMetrics()
	events := []retryhttp.Event{
		{Kind: retryhttp.EventAttempt, Upstream: "api", Attempt: 1, Status: 503, Action: retrypolicy.Retry, Delay: 250 * time.Millisecond,
			RetryAfter: "malformed", RetryAfterReason: "not-digits", Skew: 3 * time.Second, HasSkew: true},
		{Kind: retryhttp.EventAttempt, Upstream: "api", Attempt: 2, ErrorClass: retrypolicy.ConnectFailure, Action: retrypolicy.Retry, Delay: time.Second},
		{Kind: retryhttp.EventAttempt, Upstream: "api", Attempt: 3, Status: 503, Outcome: retrypolicy.OutcomeBudgetExhausted},
		{Kind: retryhttp.EventOutcome, Upstream: "api", Attempt: 3, Status: 503, Outcome: retrypolicy.OutcomeBudgetExhausted},
		{Kind: retryhttp.EventAttempt, Upstream: "api", Attempt: 1, Outcome: retrypolicy.OutcomeShed}, // never sent
		{Kind: retryhttp.EventOutcome, Upstream: "api", Status: 503, Outcome: retrypolicy.OutcomeShed},
	}
	for _, e := range events {
		m.Observe(e)
	}
	for name, tc := range map[string]struct {
		got, want float64
	}{
		"503 attempts":              {value(m.attempts.WithLabelValues("api", "503")), 2},
		"connect failures":          {value(m.attempts.WithLabelValues("api", "connect-failure")), 1},
		"budget-exhausted requests": {value(m.requests.WithLabelValues("api", "budget-exhausted")), 1},
		"budget counter":            {value(m.budgetExhausted.WithLabelValues("api")), 1},
		"shed counter":              {value(m.shed.WithLabelValues("api")), 1},
		"parse failures":            {value(m.retryAfterFailures.WithLabelValues("api", "not-digits")), 1},
		"skew":                      {value(m.skew.WithLabelValues("api")), 3},
		"attempt series":            {float64(count(m.attempts)), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.Observe(events[0]) }); n > 0 {
		t.Errorf("Observe allocates %v times per event; want 0", n)
	}
}

// The status label takes its value from the network (an HTTP/2 upstream may
// answer any integer): a status outside 100–999 is "other", never a series of
// its own nor an error class.
func TestMetricsStatusLabelIsBounded(t *testing.T) {
	m := NewMetrics()
	for _, status := range []int{200, 999, 1000, 12345678, 99, -1, -3} {
		m.Observe(retryhttp.Event{Kind: retryhttp.EventAttempt, Upstream: "api", Attempt: 1, Status: status})
	}
	for label, want := range map[string]float64{"200": 1, "999": 1, "other": 5} {
		if got := value(m.attempts.WithLabelValues("api", label)); got != want {
			t.Errorf("attempts_total{status=%q} = %v, want %v", label, got, want)
		}
	}
	if n := count(m.attempts); n != 3 {
		t.Errorf("%d attempts_total series, want 3 (200, 999, other)", n)
	}
}

func TestLogObserverLevels(t *testing.T) {
	tests := map[string]struct {
		event   retryhttp.Event
		atInfo  bool
		atDebug bool
	}{
		"a first-attempt success is routine": {
			event: retryhttp.Event{Kind: retryhttp.EventOutcome, Attempt: 1, Outcome: retrypolicy.OutcomeSuccess}, atDebug: true,
		},
		"a success after retries is notable": {
			event: retryhttp.Event{Kind: retryhttp.EventOutcome, Attempt: 2, Outcome: retrypolicy.OutcomeSuccess}, atInfo: true, atDebug: true,
		},
		"a retry decision is notable": {
			event: retryhttp.Event{Kind: retryhttp.EventAttempt, Attempt: 1, Status: 503, Action: retrypolicy.Retry}, atInfo: true, atDebug: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, lvl := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
				var b bytes.Buffer
				NewLogObserver(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: lvl}))).Observe(tc.event)
				want := tc.atInfo
				if lvl == slog.LevelDebug {
					want = tc.atDebug
				}
				if (b.Len() > 0) != want {
					t.Errorf("at %v: logged %q, want logged=%v", lvl, b.String(), want)
				}
			}
		})
	}
}

// proxyOver is the handler over a policy for up's host and the upstream
// client o configures, served on loopback, and a client that goes through it.
func proxyOver(tb testing.TB, up *httptest.Server, o Options) *http.Client {
	tb.Helper()
	doc, err := policyset.FromPolicyYAML([]byte(policysettest.PolicyYAML(up.Listener.Addr().String(), "")))
	if err != nil {
		tb.Fatal(err)
	}
	sel, _ := policyset.Select(doc, nil)
	set, err := policyset.Compile(sel)
	if err != nil {
		tb.Fatal(err)
	}
	m := NewMetrics()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	inner := UpstreamClient(o)
	tb.Cleanup(inner.CloseIdleConnections)
	rt := &retryhttp.Transport{Inner: inner, Route: set.MatchRequest,
		Observer: retryhttp.Observers{m, NewLogObserver(log)}}
	front := httptest.NewServer(&Proxy{Transport: rt, Metrics: m, Log: log, Route: set.MatchRequest})
	tb.Cleanup(front.Close)
	pu, _ := url.Parse(front.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// upstreamClients are the two settings of --http1-upstream-client.
var upstreamClients = map[string]bool{"h1client": true, "net/http": false}

// TestBothUpstreamClientsCarryTheRequest: with --http1-upstream-client on and
// off, a GET and a POST reach the upstream once, unchanged, and come back a
// success.
func TestBothUpstreamClientsCarryTheRequest(t *testing.T) {
	for client, on := range upstreamClients {
		t.Run(client, func(t *testing.T) {
			var got atomic.Value
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got.Store(r.Method + " " + r.URL.Path + " " + string(b))
				io.WriteString(w, "ok")
			}))
			defer up.Close()
			o := DefaultOptions()
			o.HTTP1UpstreamClient = on
			c := proxyOver(t, up, o)
			for _, req := range []struct{ method, body, want string }{
				{"GET", "", "GET /a "},
				{"POST", "x=1", "POST /a x=1"},
			} {
				r, _ := http.NewRequest(req.method, up.URL+"/a", strings.NewReader(req.body))
				resp, err := c.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "ok" || resp.Header.Get("X-Retry-Outcome") != "success" || got.Load() != req.want {
					t.Errorf("%s: body %q, outcome %q, upstream read %q; want ok, success, %q",
						req.method, b, resp.Header.Get("X-Retry-Outcome"), got.Load(), req.want)
				}
			}
		})
	}
}

// BenchmarkProxy measures the handler end to end (client → proxy → upstream on
// loopback, keep-alive) with a policy that matches, as in production, with
// each upstream client (docs/performance.md#the-upstream-client).
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, client := range []string{"h1client", "net/http"} {
		b.Run(client, func(b *testing.B) {
			o := DefaultOptions()
			o.HTTP1UpstreamClient = upstreamClients[client]
			c := proxyOver(b, up, o)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(up.URL + "/")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// value reads a counter or gauge.
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	go func() { c.Collect(ch); close(ch) }()
	var v float64
	for m := range ch {
		var d dto.Metric
		_ = m.Write(&d)
		switch {
		case d.Counter != nil:
			v += d.Counter.GetValue()
		case d.Gauge != nil:
			v += d.Gauge.GetValue()
		}
	}
	return v
}

// count is the number of series a collector has.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
