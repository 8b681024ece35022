package main_test

// TLS origination (docs/tls.md): the app sends http:// through the sidecar and
// the sidecar speaks TLS to upstreams on 127.0.0.1 whose certificates come
// from a CA generated here. Every promise of docs/sidecar.md holds over TLS too.

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

var serial atomic.Int64

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// leaf issues a server certificate for the DNS names and 127.0.0.1.
func (ca *testCA) leaf(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsUpstream is the scripted upstream served over TLS; it counts handshakes
// (ClientHellos) and records the SNI of the last one.
type tlsUpstream struct {
	*upstream
	hellos atomic.Int64
	sni    atomic.Value
}

func newTLSUpstream(t *testing.T, cert tls.Certificate, h2only bool, script func(n int, w http.ResponseWriter, r *http.Request)) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{upstream: &upstream{}}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "plain HTTP reached a TLS upstream", 500)
			return
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		h := r.Header.Clone()
		h.Set("X-Test-Proto", r.Proto)
		u.arrivals = append(u.arrivals, arrival{at: time.Now(), method: r.Method, path: r.URL.Path, header: h, body: string(b)})
		n := len(u.arrivals)
		u.mu.Unlock()
		script(n, w, r)
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		u.hellos.Add(1)
		u.sni.Store(hi.ServerName)
		return nil, nil
	}}
	if h2only {
		var p http.Protocols
		p.SetHTTP2(true)
		u.srv.Config.Protocols = &p
		u.srv.EnableHTTP2 = true
	}
	u.srv.StartTLS()
	if h2only {
		u.srv.TLS.NextProtos = []string{"h2"}
	}
	t.Cleanup(u.srv.Close)
	return u
}

// tlsPolicy is a policy file for host with tls fields, plus the CA as a
// ConfigMap document (what tls.caCertificateRefs resolve against standalone).
func tlsPolicy(t *testing.T, host, tlsFields string, ca *testCA, extra ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, p, tlsPolicyYAML("up", host, tlsFields, ca, extra...))
	return p
}

// tlsPolicyYAML is the content of tlsPolicy, for an upstream named upstream.
func tlsPolicyYAML(upstream, host, tlsFields string, ca *testCA, extra ...string) string {
	y := policyYAML("test", upstream, host, append(fields(extra...), "tls: "+tlsFields)...)
	if ca != nil {
		y += "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: test-ca}\ndata:\n  ca.crt: |\n    " +
			strings.ReplaceAll(strings.TrimSpace(ca.pem), "\n", "\n    ") + "\n"
	}
	return y
}

const privateCA = "{hostname: upstream.test, caCertificateRefs: [{name: test-ca}]}"

func TestTLS429RetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), false, sequence(status(429, "Retry-After", "1"), status(200)))
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), privateCA, ca))
	r := s.get(up.url("/quota"))
	assertOutcome(t, r, 200, "success", "2")
	got := up.got()
	if gap := got[1].at.Sub(got[0].at); gap < time.Second {
		t.Fatalf("second attempt %v after the first; Retry-After: 1 asks for at least 1s", gap)
	}
	if a, b := got[0].header.Get("X-Retry-Attempt"), got[1].header.Get("X-Retry-Attempt"); a != "1" || b != "2" {
		t.Errorf("X-Retry-Attempt %q, %q; want 1, 2", a, b)
	}
	if sni := up.sni.Load(); sni != "upstream.test" {
		t.Errorf("SNI %q, want upstream.test (tls.hostname)", sni)
	}
	if n := up.hellos.Load(); n != 1 {
		t.Errorf("%d TLS handshakes, want 1: the retry reuses the pooled connection", n)
	}
}

func TestTLS503ThenSuccessIsRetried(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), false, sequence(status(503), status(503), status(200)))
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), privateCA, ca, "maxAttempts: 4"))
	assertOutcome(t, s.get(up.url("/")), 200, "success", "3")
	if n := len(up.got()); n != 3 {
		t.Fatalf("upstream got %d requests, want 3", n)
	}
}

func TestTLSPOSTWithoutKeyIsNotReplayed(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), false, status(503))
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), privateCA, ca, "idempotencyKey: {header: Idempotency-Key}"))
	req, _ := http.NewRequest(http.MethodPost, up.url("/orders"), strings.NewReader(`{"item":1}`))
	assertOutcome(t, s.do(req), 503, "not-replayable", "1")
	time.Sleep(200 * time.Millisecond)
	if got := up.got(); len(got) != 1 || got[0].body != `{"item":1}` {
		t.Fatalf("a POST without idempotency key reached the upstream %d times (want 1 with its body)", len(got))
	}
}

// A certificate that does not verify is not retried: one handshake, 502
// upstream-error, a body naming the reason.
func TestTLSCertificateThatDoesNotVerifyIs502WithOneHandshake(t *testing.T) {
	t.Parallel()
	trusted, other := newTestCA(t, "trusted CA"), newTestCA(t, "other CA")
	tests := map[string]struct {
		cert      func(t *testing.T) tls.Certificate
		tlsFields string
		wantBody  string
	}{
		"a certificate from another CA": {
			cert:      func(t *testing.T) tls.Certificate { return other.leaf(t, "upstream.test") },
			tlsFields: privateCA,
			wantBody:  "retry-sidecar: upstream-error: the upstream's TLS certificate did not verify: x509: certificate signed by unknown authority",
		},
		"a certificate for another name": {
			cert:      func(t *testing.T) tls.Certificate { return trusted.leaf(t, "elsewhere.test") },
			tlsFields: privateCA,
			wantBody:  "retry-sidecar: upstream-error: the upstream's TLS certificate did not verify: x509: certificate is valid for elsewhere.test, not upstream.test",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newTLSUpstream(t, tc.cert(t), false, status(200))
			s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), tc.tlsFields, trusted, "maxAttempts: 5"))
			r := s.get(up.url("/"))
			assertOutcome(t, r, http.StatusBadGateway, "upstream-error", "1")
			if !strings.HasPrefix(r.body, tc.wantBody) {
				t.Errorf("body %q\nwant it to start with %q", r.body, tc.wantBody)
			}
			time.Sleep(200 * time.Millisecond)
			if n := up.hellos.Load(); n != 1 {
				t.Errorf("%d handshakes, want exactly 1 (no retry)", n)
			}
			if n := len(up.got()); n != 0 {
				t.Errorf("%d requests reached the upstream, want 0", n)
			}
			s.waitMetric(`retry_sidecar_attempts_total{status="untrusted-certificate",upstream="up"}`, 1)
		})
	}
}

// A handshake that fails for another reason (the peer hangs up) is a connect
// failure: nothing was sent, so even a POST without a key is retried.
func TestTLSHandshakeFailureIsRetriedAsConnectFailure(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	cert := ca.leaf(t, "upstream.test")
	var conns atomic.Int64
	var requests atomic.Int64
	ln := acceptLoop(t, func(c net.Conn) {
		if conns.Add(1) <= 2 {
			c.Close() // hang up during the handshake
			return
		}
		go serveOneTLS(c, cert, func(req *http.Request, w *bufio.Writer) bool {
			requests.Add(1)
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		})
	})
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, ln.Addr().String(), privateCA, ca, "maxAttempts: 4"))
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/orders", strings.NewReader("x"))
	assertOutcome(t, s.do(req), 200, "success", "3")
	if n := requests.Load(); n != 1 {
		t.Fatalf("upstream got %d requests, want 1", n)
	}
}

func TestTLSHTTP2OnlyUpstreamIsServed(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), true, sequence(status(503), status(200)))
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), privateCA, ca))
	assertOutcome(t, s.get(up.url("/a")), 200, "success", "2")
	assertOutcome(t, s.get(up.url("/b")), 200, "success", "1")
	got := up.got()
	for i, a := range got {
		if p := a.header.Get("X-Test-Proto"); p != "HTTP/2.0" {
			t.Errorf("request %d arrived as %s, want HTTP/2.0", i+1, p)
		}
		if ua := a.header.Get("User-Agent"); ua != "Go-http-client/1.1" {
			t.Errorf("request %d User-Agent %q, want the app's own", i+1, ua)
		}
	}
	if len(got) != 3 || got[1].header.Get("X-Retry-Attempt") != "2" {
		t.Fatalf("arrivals %d; want 3 with the retry marked X-Retry-Attempt: 2", len(got))
	}
	if n := up.hellos.Load(); n != 1 {
		t.Errorf("%d handshakes, want 1: one multiplexed connection", n)
	}
}

// tls: {} verifies against the system roots, which SSL_CERT_FILE replaces; the
// name verified is the request's host (here the IP literal).
func TestTLSSystemRootsHonourSSLCertFile(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), false, status(200))
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, bundle, ca.pem)
	s := startSidecarEnv(t, []string{"SSL_CERT_FILE=" + bundle}, "--policy-file="+tlsPolicy(t, up.host(), "{}", nil))
	assertOutcome(t, s.get(up.url("/")), 200, "success", "1")
	plain := startSidecarEnv(t, []string{"SSL_CERT_FILE=" + filepath.Join(t.TempDir(), "none.pem"), "SSL_CERT_DIR=/nonexistent"},
		"--policy-file="+tlsPolicy(t, up.host(), "{}", nil))
	assertOutcome(t, plain.get(up.url("/")), http.StatusBadGateway, "upstream-error", "1")
}

// An upstream that closes idle keep-alive connections (as Node and Apache do
// after 5 s) never causes a 502: the pooled TLS connection is checked before
// reuse. The second request is a POST without a key, which a write onto the
// dead connection would turn into a 502.
func TestTLSIdleConnectionClosedByUpstreamNeverCauses502(t *testing.T) {
	t.Parallel()
	for name, h2only := range map[string]bool{"HTTP/1.1": false, "HTTP/2 (GOAWAY, then close)": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ca := newTestCA(t, "test CA")
			up := newTLSUpstream(t, ca.leaf(t, "upstream.test"), h2only, status(200))
			up.srv.Config.IdleTimeout = 50 * time.Millisecond
			s := startSidecar(t, "--policy-file="+tlsPolicy(t, up.host(), privateCA, ca))
			for i := range 5 {
				req, _ := http.NewRequest(http.MethodPost, up.url("/orders"), strings.NewReader("x"))
				assertOutcome(t, s.do(req), 200, "success", "1")
				if i < 4 {
					time.Sleep(150 * time.Millisecond)
				}
			}
			if n := len(up.got()); n != 5 {
				t.Fatalf("upstream got %d requests, want 5", n)
			}
			if n := up.hellos.Load(); n != 5 {
				t.Errorf("%d handshakes, want 5 (each idle connection was closed by the upstream)", n)
			}
		})
	}
}

// An upstream that reads a request on a reused TLS connection and hangs up
// without answering got one transmission, and exactly one is counted: the
// POST is not resent below the policy.
func TestTLSRequestReadThenClosedOnReusedConnectionIsOneTransmission(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	cert := ca.leaf(t, "upstream.test")
	var mu sync.Mutex
	var seen []string
	ln := acceptLoop(t, func(c net.Conn) {
		n := 0
		go serveOneTLS(c, cert, func(req *http.Request, w *bufio.Writer) bool {
			mu.Lock()
			seen = append(seen, req.Method+" "+req.URL.Path+" attempt "+req.Header.Get("X-Retry-Attempt"))
			mu.Unlock()
			n++
			if n == 1 {
				io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return true
			}
			return false // read the second request, then hang up
		})
	})
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, ln.Addr().String(), privateCA, ca, "maxAttempts: 4"))
	assertOutcome(t, s.get("http://"+ln.Addr().String()+"/first"), 200, "success", "1")
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/orders", strings.NewReader("x"))
	assertOutcome(t, s.do(req), http.StatusBadGateway, "not-replayable", "1")
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /first attempt 1", "POST /orders attempt 1"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("upstream saw %q, want %q", seen, want)
	}
}

// acceptLoop listens on 127.0.0.1 for the rest of the test and hands every
// connection to handle, on the accepting goroutine. Connections still open
// when the test ends are closed.
func acceptLoop(t *testing.T, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			handle(c)
		}
	}()
	return ln
}

// serveOneTLS serves HTTP/1.1 over TLS on c with a raw loop: answer writes a
// response and returns whether to keep the connection.
func serveOneTLS(c net.Conn, cert tls.Certificate, answer func(*http.Request, *bufio.Writer) bool) {
	tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	defer tc.Close()
	br, bw := bufio.NewReader(tc), bufio.NewWriter(tc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		keep := answer(req, bw)
		bw.Flush()
		if !keep {
			return
		}
	}
}

// No bytes cross between exchanges over TLS: bytes an upstream sends beyond a
// response (in the same TLS record, or later while the connection is idle) are
// never read as the answer to the next request; that connection is not reused.
func TestTLSStrayBytesNeverReachAnotherRequest(t *testing.T) {
	t.Parallel()
	tests := map[string]func(w *bufio.Writer, tc net.Conn){
		"extra bytes right after the response": func(w *bufio.Writer, _ net.Conn) {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
		},
		"an unsolicited 408 while the connection is idle": func(w *bufio.Writer, tc net.Conn) {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			go func() {
				time.Sleep(50 * time.Millisecond)
				io.WriteString(tc, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 5\r\n\r\nstray")
			}()
		},
	}
	for name, firstAnswer := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ca := newTestCA(t, "test CA")
			cert := ca.leaf(t, "upstream.test")
			var conns atomic.Int64
			ln := acceptLoop(t, func(c net.Conn) {
				conns.Add(1)
				go func() {
					tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
					defer tc.Close()
					br, bw := bufio.NewReader(tc), bufio.NewWriter(tc)
					for n := 1; ; n++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if n == 1 {
							firstAnswer(bw, tc)
						} else {
							io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nreused")
						}
						bw.Flush()
					}
				}()
			})
			s := startSidecar(t, "--policy-file="+tlsPolicy(t, ln.Addr().String(), privateCA, ca))
			for i := range 2 {
				r := s.get("http://" + ln.Addr().String() + "/")
				if r.status != 200 || r.body != "ok" {
					t.Fatalf("request %d: %d %q, want 200 \"ok\" from a connection of its own", i+1, r.status, r.body)
				}
				time.Sleep(150 * time.Millisecond)
			}
			if n := conns.Load(); n != 2 {
				t.Errorf("%d connections, want 2 (the first one was not reusable)", n)
			}
		})
	}
}

// An upstream that answers (413) before reading the whole request body and
// closes has its answer relayed over TLS too, not replaced by a 502.
func TestTLSEarlyAnswerIsRelayed(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "test CA")
	cert := ca.leaf(t, "upstream.test")
	ln := acceptLoop(t, func(c net.Conn) {
		go func() {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
			defer tc.Close()
			if _, err := http.ReadRequest(bufio.NewReader(tc)); err != nil {
				return
			}
			io.WriteString(tc, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 9\r\n\r\ntoo large")
		}()
	})
	s := startSidecar(t, "--policy-file="+tlsPolicy(t, ln.Addr().String(), privateCA, ca))
	body := strings.Repeat("x", 8<<20)
	req, _ := http.NewRequest(http.MethodPut, "http://"+ln.Addr().String()+"/upload", strings.NewReader(body))
	r := s.do(req)
	assertOutcome(t, r, http.StatusRequestEntityTooLarge, "not-retryable", "1")
	if r.body != "too large" {
		t.Errorf("body %q, want the upstream's", r.body)
	}
}

// A CA rotation reaches the running sidecar with the configuration: the
// upstream's new certificate verifies as soon as the policy file names the new
// CA, with no restart.
func TestTLSCARotationByReload(t *testing.T) {
	t.Parallel()
	oldCA, newCA := newTestCA(t, "old CA"), newTestCA(t, "new CA")
	up := newTLSUpstream(t, newCA.leaf(t, "upstream.test"), false, status(200))
	file := tlsPolicy(t, up.host(), privateCA, oldCA)
	s := startSidecar(t, "--policy-file="+file)
	assertOutcome(t, s.get(up.url("/")), http.StatusBadGateway, "upstream-error", "1")

	rotated, err := os.ReadFile(tlsPolicy(t, up.host(), privateCA, newCA))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, string(rotated))
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.get(up.url("/"))
		if r.status == 200 {
			assertOutcome(t, r, 200, "success", "1")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %q 10s after the CA was rotated in the policy file", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A handshake the upstream never answers is a connect failure in phase tls
// whichever timer cuts it (docs/retry-semantics.md#timeouts): nothing was
// sent, so even a POST without a key is retried up to maxAttempts; only the
// deadline ends it sooner, as deadline-exceeded, still in phase tls.
func TestTLSStalledHandshakeIsAConnectFailureWhicheverTimerCutsIt(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		dialTimeout string
		fields      []string
		status      int
		outcome     string
		attempts    int
	}{
		"connectTimeout fires first": {dialTimeout: "5s",
			fields: []string{"connectTimeout: 300ms", "perTryTimeout: 2s", "deadline: 10s"},
			status: http.StatusGatewayTimeout, outcome: "exhausted", attempts: 3},
		"perTryTimeout fires first": {dialTimeout: "5s",
			fields: []string{"connectTimeout: 2s", "perTryTimeout: 300ms", "deadline: 10s"},
			status: http.StatusGatewayTimeout, outcome: "exhausted", attempts: 3},
		"--dial-timeout fires first": {dialTimeout: "300ms",
			fields: []string{"connectTimeout: 2s", "perTryTimeout: 2s", "deadline: 10s"},
			status: http.StatusGatewayTimeout, outcome: "exhausted", attempts: 3},
		"the deadline fires first": {dialTimeout: "5s",
			fields: []string{"deadline: 400ms"},
			status: http.StatusGatewayTimeout, outcome: "deadline-exceeded", attempts: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ca := newTestCA(t, "test CA")
			var accepted atomic.Int64
			// Read nothing, answer nothing: acceptLoop closes the connections at the end.
			ln := acceptLoop(t, func(net.Conn) { accepted.Add(1) })
			s := startSidecar(t, "--dial-timeout="+tc.dialTimeout, "--policy-file="+tlsPolicy(t, ln.Addr().String(), privateCA, ca,
				append([]string{"maxAttempts: 3"}, tc.fields...)...))
			req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/orders", strings.NewReader("x"))
			r := s.do(req)
			assertOutcome(t, r, tc.status, tc.outcome, fmt.Sprint(tc.attempts))
			if p := r.header.Get("X-Retry-Timeout-Phase"); p != "tls" {
				t.Errorf("X-Retry-Timeout-Phase %q, want tls", p)
			}
			if r.elapsed > 3*time.Second {
				t.Errorf("took %v; handshakes bounded by 300ms (400ms) and short backoffs take well under 3s", r.elapsed)
			}
			if n := accepted.Load(); n != int64(tc.attempts) {
				t.Errorf("%d connections, want %d", n, tc.attempts)
			}
			s.waitMetric(`retry_sidecar_timeouts_total{phase="tls",upstream="up"}`, float64(tc.attempts))
			if !strings.Contains(s.logs.String(), `"phase":"tls"`) || strings.Contains(s.logs.String(), `"phase":"connect"`) {
				t.Errorf(`want log lines with "phase":"tls" and none with "phase":"connect"`)
			}
		})
	}
}
