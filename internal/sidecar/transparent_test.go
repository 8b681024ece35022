package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// TestTransparent drives the transparent handler in-process: the original
// destination that SO_ORIGINAL_DST would report is put into each connection's
// context by the test server (the real redirect is tested with real clients
// in cmd/retry-sidecar, as root in a network namespace).
func TestTransparent(t *testing.T) {
	var mu sync.Mutex
	arrivals := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals[r.Host+r.URL.Path]++
		n := arrivals[r.Host+r.URL.Path]
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())

	policy := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(policy, []byte(policysettest.PolicyYAML("api.example", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	m := NewMetrics()
	rl := config.NewReloader(config.Sources{PolicyFiles: []string{policy}}, log, m)
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	self := netip.MustParseAddrPort("127.0.0.1:15006")
	handler := &Transparent{
		Proxy: newUpstreamStack(DefaultOptions(), log, nil, rl, m, nil).proxy(byHost),
		Self:  []netip.AddrPort{self},
	}

	tests := map[string]struct {
		dst          netip.AddrPort
		dstErr       error
		host, path   string
		absoluteForm bool
		status       int
		outcome      string
		arrivals     int
	}{
		"a Host with a policy is retried at the original destination": {
			dst: upAddr, host: "api.example", path: "/a", status: 200, outcome: "success", arrivals: 2},
		"a Host without a policy passes through once": {
			dst: upAddr, host: "other.example", path: "/b", status: 503, arrivals: 1},
		"the sidecar's own address is a loop": {
			dst: self, host: "api.example", path: "/c", status: 508},
		"an IPv4-mapped form of the sidecar's own address is a loop too": {
			dst: netip.MustParseAddrPort("[::ffff:127.0.0.1]:15006"), host: "api.example", path: "/d", status: 508},
		"an absolute-form request is refused": {
			dst: upAddr, host: "api.example", path: "/e", absoluteForm: true, status: 400},
		"a connection without an original destination is refused": {
			dstErr: errors.New("ENOENT"), host: "api.example", path: "/f", status: 502},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			front := httptest.NewUnstartedServer(handler)
			front.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
				return context.WithValue(ctx, originalDstKey{}, originalDst{addr: tc.dst, err: tc.dstErr})
			}
			front.Start()
			defer front.Close()
			tr := &http.Transport{}
			target := front.URL + tc.path
			if tc.absoluteForm {
				pu, _ := url.Parse(front.URL)
				tr.Proxy = http.ProxyURL(pu)
				target = "http://" + tc.host + tc.path
			}
			req, _ := http.NewRequest(http.MethodGet, target, nil)
			req.Host = tc.host
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get(retryhttp.HeaderOutcome) != tc.outcome {
				t.Errorf("got %d, outcome %q; want %d, %q", resp.StatusCode, resp.Header.Get(retryhttp.HeaderOutcome), tc.status, tc.outcome)
			}
			mu.Lock()
			got := arrivals[tc.host+tc.path]
			mu.Unlock()
			if got != tc.arrivals {
				t.Errorf("upstream arrivals = %d, want %d (with Host %s)", got, tc.arrivals, tc.host)
			}
		})
	}
}
