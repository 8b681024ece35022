//go:build linux

package main_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// inside runs f on a thread that has entered the namespace: the sockets f
// opens (listeners, the app's connections) live in the namespace for good,
// whichever thread uses them later. The thread is never unlocked, so it ends
// with f instead of going back to the runtime in the wrong namespace.
func (n *netns) inside(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(filepath.Join("/run/netns", n.name))
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// listenInside listens on addr inside the namespace until the test ends.
func (n *netns) listenInside(addr string) net.Listener {
	n.t.Helper()
	var ln net.Listener
	must(n.t, n.inside(func() (err error) { ln, err = net.Listen("tcp", addr); return err }))
	n.t.Cleanup(func() { ln.Close() })
	return ln
}

// tlsArrival is a request a TLS upstream in the namespace received.
type tlsArrival struct {
	local, sni, authorization, attempt string
}

// TestTransparentInterceptionOriginatesTLS: an app that knows nothing of the
// sidecar calls http://api.retry.test/ on port 80 with a bearer token; the
// redirect rules hand the connection to the transparent listener, and since
// the policy has tls the request leaves over verified TLS to port 443 of the
// connection's original destination (SNI and verified name: the Host header),
// exactly as through the forward proxy; nothing reaches port 80 in clear text
// (docs/clients.md#tls).
func TestTransparentInterceptionOriginatesTLS(t *testing.T) {
	n := newNetns(t)
	ca := newTestCA(t, "test CA")
	ups := serveTLSAndWatchPort80(n, ca.leaf(t, apiHost), apiAddr, otherAddr)
	policy := filepath.Join(n.dir, "policy.yaml")
	must(t, os.WriteFile(policy, []byte(tlsPolicyYAML("api", apiHost, "{caCertificateRefs: [{name: test-ca}]}", ca, "maxAttempts: 3")), 0o644))
	ready := filepath.Join(n.dir, "run", "sidecar.ready")
	n.background(n.commandAs(t.Context(), sidecarUID, n.bin,
		fmt.Sprintf("--listen=127.0.0.1:%d", v1alpha1.ProxyPort),
		fmt.Sprintf("--admin-listen=127.0.0.1:%d", v1alpha1.AdminPort),
		fmt.Sprintf("--transparent-listen=127.0.0.1:%d", v1alpha1.TransparentPort),
		"--policy-file="+policy, "--ready-file="+ready, "--drain-timeout=1s"), ready)
	n.must(n.bin, injectedRedirectArgs(t)...)

	for name, tc := range tlsOriginationCases {
		t.Run(name, func(t *testing.T) {
			ups.forget()
			resp, body := getOrdersWithToken(t, n, tc.dial)
			if resp.StatusCode != 200 || resp.Header.Get("X-Retry-Outcome") != "success" || resp.Header.Get("X-Retry-Attempts") != "2" || string(body) != "hello over TLS" {
				t.Errorf("app got %d, outcome %q, attempts %q, body %q; want 200, success, 2, \"hello over TLS\"",
					resp.StatusCode, resp.Header.Get("X-Retry-Outcome"), resp.Header.Get("X-Retry-Attempts"), body)
			}
			arrivals, clear := ups.seen()
			want := []tlsArrival{{tc.wantLocal, apiHost, "Bearer s3cret", "1"}, {tc.wantLocal, apiHost, "Bearer s3cret", "2"}}
			if fmt.Sprint(arrivals) != fmt.Sprint(want) {
				t.Errorf("TLS upstream received %v, want %v", arrivals, want)
			}
			if len(clear) != 0 {
				t.Errorf("clear text reached port 80: %q; want nothing", clear)
			}
		})
	}
}

// tlsOriginationCases are where the app connects (port 80 of an address in
// the namespace) and where the TLS upstream must receive the request.
var tlsOriginationCases = map[string]struct {
	dial      string // where the app connects
	wantLocal string // where the TLS upstream received it
}{
	"the app's address is dialled on the TLS port": {
		dial: apiAddr + ":80", wantLocal: apiAddr + ":443"},
	"the original destination is dialled, not a DNS lookup of Host": {
		dial: otherAddr + ":80", wantLocal: otherAddr + ":443"},
}

// tlsAndClearUpstreams are, at each address, a TLS upstream on port 443
// (503 to the first request of all, then "hello over TLS") and a port 80
// that records the first line of whatever reaches it in clear text.
type tlsAndClearUpstreams struct {
	mu       sync.Mutex
	arrivals []tlsArrival
	clear    []string // the first line of what reached a port 80, by address
}

func serveTLSAndWatchPort80(n *netns, cert tls.Certificate, addrs ...string) *tlsAndClearUpstreams {
	u := &tlsAndClearUpstreams{}
	for _, addr := range addrs {
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u.mu.Lock()
				u.arrivals = append(u.arrivals, tlsArrival{local: r.Context().Value(http.LocalAddrContextKey).(net.Addr).String(),
					sni: r.TLS.ServerName, authorization: r.Header.Get("Authorization"), attempt: r.Header.Get("X-Retry-Attempt")})
				first := len(u.arrivals) == 1
				u.mu.Unlock()
				if first {
					w.WriteHeader(http.StatusServiceUnavailable) // the policy still retries over TLS
					return
				}
				io.WriteString(w, "hello over TLS")
			}),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		}
		go srv.ServeTLS(n.listenInside(addr+":443"), "", "")
		n.t.Cleanup(func() { srv.Close() })
		go u.recordClearText(n.listenInside(addr + ":80"))
	}
	return u
}

func (u *tlsAndClearUpstreams) recordClearText(plain net.Listener) {
	for {
		c, err := plain.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		u.mu.Lock()
		u.clear = append(u.clear, c.LocalAddr().String()+" "+strings.TrimSpace(line))
		u.mu.Unlock()
		c.Close()
	}
}

// forget drops what the upstreams have seen so far.
func (u *tlsAndClearUpstreams) forget() {
	u.mu.Lock()
	u.arrivals, u.clear = nil, nil
	u.mu.Unlock()
}

// seen is what the TLS upstreams and the clear-text ports have seen since
// the last forget.
func (u *tlsAndClearUpstreams) seen() (arrivals []tlsArrival, clear []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.arrivals), slices.Clone(u.clear)
}

// getOrdersWithToken is the app's GET /orders for apiHost with a bearer
// token, sent to dial from inside n; it returns the response and its body.
func getOrdersWithToken(t *testing.T, n *netns, dial string) (*http.Response, []byte) {
	t.Helper()
	var resp *http.Response
	var body []byte
	err := n.inside(func() error {
		c, err := net.DialTimeout("tcp", dial, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, "GET /orders HTTP/1.1\r\nHost: "+apiHost+"\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n")
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			return err
		}
		body, err = io.ReadAll(resp.Body)
		return err
	})
	must(t, err)
	return resp, body
}
