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

// transparentCase is one request to the transparent handler: the original
// destination its connection reports, what it sends, and the response and
// upstream arrivals it must cause.
type transparentCase struct {
	dst          netip.AddrPort
	dstErr       error
	host, path   string
	absoluteForm bool
	status       int
	outcome      string
	arrivals     int
}

// transparentCases are the cases of TestTransparent: upAddr is the upstream's
// address and self the sidecar's own.
func transparentCases(upAddr, self netip.AddrPort) map[string]transparentCase {
	return map[string]transparentCase{
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
}

// failOnceUpstream is an upstream that answers 503 to the first request for
// each Host and path and "ok" after that, counting the arrivals of each.
type failOnceUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals map[string]int // by Host+path
}

func newFailOnceUpstream(t *testing.T) *failOnceUpstream {
	u := &failOnceUpstream{arrivals: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.arrivals[r.Host+r.URL.Path]++
		n := u.arrivals[r.Host+r.URL.Path]
		u.mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *failOnceUpstream) arrivalsOf(hostPath string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.arrivals[hostPath]
}

// newTransparentHandler is the transparent handler with a policy for
// api.example, whose own address is self.
func newTransparentHandler(t *testing.T, self netip.AddrPort) *Transparent {
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
	return &Transparent{
		Proxy: newUpstreamStack(DefaultOptions(), log, nil, rl, m, nil).proxy(byHost),
		Self:  []netip.AddrPort{self},
	}
}

// sendThroughTransparent sends tc's request to handler on a connection whose
// original destination is tc's, and returns the response with its body read.
func sendThroughTransparent(t *testing.T, handler http.Handler, tc transparentCase) *http.Response {
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
	return resp
}

// TestTransparent drives the transparent handler in-process: the original
// destination that SO_ORIGINAL_DST would report is put into each connection's
// context by the test server (the real redirect is tested with real clients
// in cmd/retry-sidecar, as root in a network namespace).
func TestTransparent(t *testing.T) {
	up := newFailOnceUpstream(t)
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	self := netip.MustParseAddrPort("127.0.0.1:15006")
	handler := newTransparentHandler(t, self)
	for name, tc := range transparentCases(upAddr, self) {
		t.Run(name, func(t *testing.T) {
			resp := sendThroughTransparent(t, handler, tc)
			if resp.StatusCode != tc.status || resp.Header.Get(retryhttp.HeaderOutcome) != tc.outcome {
				t.Errorf("got %d, outcome %q; want %d, %q", resp.StatusCode, resp.Header.Get(retryhttp.HeaderOutcome), tc.status, tc.outcome)
			}
			if got := up.arrivalsOf(tc.host + tc.path); got != tc.arrivals {
				t.Errorf("upstream arrivals = %d, want %d (with Host %s)", got, tc.arrivals, tc.host)
			}
		})
	}
}
