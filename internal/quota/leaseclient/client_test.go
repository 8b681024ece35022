package leaseclient

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// fakeEndpoint answers every lease with code (for 200, a reply of 2 send
// times, the first 5 ms ago: fakeReply), over HTTPS on loopback, and records the bearer tokens it was given.
type fakeEndpoint struct {
	srv    *httptest.Server
	mu     sync.Mutex
	code   int
	tokens []string
}

func newFakeEndpoint(t *testing.T, code int) *fakeEndpoint {
	t.Helper()
	return newFakeEndpointTLS(t, code, nil)
}

// newFakeEndpointTLS is newFakeEndpoint serving with cfg (nil: httptest's).
func newFakeEndpointTLS(t *testing.T, code int, cfg *tls.Config) *fakeEndpoint {
	t.Helper()
	f := &fakeEndpoint{code: code}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.tokens = append(f.tokens, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		code := f.code
		f.mu.Unlock()
		if code == http.StatusOK {
			_, _ = w.Write([]byte(`{"granted":2,"first":-5000000,"spacing":10000000,"lateness":190000000,"rate":50,"fleetDemand":3,"pods":1}`))
			return
		}
		http.Error(w, http.StatusText(code), code)
	}))
	f.srv.TLS = cfg
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// fakeReply is the reply of a fakeEndpoint answering 200.
var fakeReply = quota.LeaseReply{Granted: 2, First: -5 * time.Millisecond, Spacing: 10 * time.Millisecond,
	Lateness: 190 * time.Millisecond, Rate: 50, FleetDemand: 3, Pods: 1}

func (f *fakeEndpoint) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// caPEM is the PEM of the test server's certificate.
func (f *fakeEndpoint) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
}

// newStore is a Store of f, reaching it as https://example.com (a name its
// certificate carries) at its loopback address, with the token in a file.
func newStore(t *testing.T, f *fakeEndpoint, token string, ca []byte) (*Store, string, *time.Time) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{URL: "https://example.com:443", Address: f.srv.Listener.Addr().String(), CABundle: ca, TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1796083200, 0)
	s.now = func() time.Time { return now }
	return s, file, &now
}

func lease(s *Store) (quota.LeaseReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Lease(ctx, quota.Spec{Name: "partner"}, quota.LeaseRequest{Pod: "not sent", Namespace: "not sent", Want: 2, Demand: 3})
}

func TestTheEndpointsAnswersMapOntoTheClientsStates(t *testing.T) {
	for name, tc := range map[string]struct {
		code              int
		revoked, late, ok bool
	}{
		"200 is the reply":                                  {code: 200, ok: true},
		"401 (token refused) is revoked":                    {code: 401, revoked: true},
		"403 (not a consumer) is revoked":                   {code: 403, revoked: true},
		"429 is a late lease":                               {code: 429, late: true},
		"503 (store or API server lost) is a lost store":    {code: 503},
		"400 (a body the endpoint refuses) is a lost store": {code: 400},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeEndpoint(t, tc.code)
			s, _, _ := newStore(t, f, "tok", f.caPEM())
			reply, err := lease(s)
			switch {
			case tc.ok && (err != nil || reply != fakeReply):
				t.Errorf("Lease = %+v, %v; want %+v", reply, err, fakeReply)
			case !tc.ok && err == nil:
				t.Errorf("Lease = %+v, want an error", reply)
			case errors.Is(err, quota.ErrRevoked) != tc.revoked || errors.Is(err, quota.ErrLate) != tc.late:
				t.Errorf("Lease = %v; want revoked %t, late %t", err, tc.revoked, tc.late)
			}
		})
	}
}

func TestARevokedClientAsksAtMostOncePerSecond(t *testing.T) {
	f := newFakeEndpoint(t, http.StatusForbidden)
	s, _, now := newStore(t, f, "tok", f.caPEM())
	for range 10 {
		if _, err := lease(s); !errors.Is(err, quota.ErrRevoked) {
			t.Fatalf("Lease = %v, want ErrRevoked", err)
		}
	}
	if n := len(f.calls()); n != 1 {
		t.Errorf("10 leases within a second of a 403 called the endpoint %d times, want 1", n)
	}
	*now = now.Add(RevokedRetry)
	f.mu.Lock()
	f.code = http.StatusOK
	f.mu.Unlock()
	if _, err := lease(s); err != nil || len(f.calls()) != 2 {
		t.Errorf("a lease a second later = %v after %d calls, want success after 2", err, len(f.calls()))
	}
}

func TestACertificateThatDoesNotChainIsALostStoreNotARevocation(t *testing.T) {
	f := newFakeEndpoint(t, http.StatusOK)
	s, _, _ := newStore(t, f, "tok", []byte(testenv.CAPEM(t, "another CA")))
	_, err := lease(s)
	if err == nil || errors.Is(err, quota.ErrRevoked) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Lease = %v, want a certificate error that is not a revocation", err)
	}
	if n := len(f.calls()); n != 0 {
		t.Errorf("the endpoint got %d requests over an unverified connection, want 0", n)
	}
}

func TestTheTokenFollowsTheKubeletsRotation(t *testing.T) {
	f := newFakeEndpoint(t, http.StatusOK)
	s, file, now := newStore(t, f, "first", f.caPEM())
	write := func(tok string) {
		if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = lease(s)
	write("second")
	_, _ = lease(s) // within TokenReread: the token read before
	*now = now.Add(TokenReread)
	_, _ = lease(s)
	f.mu.Lock()
	f.code = http.StatusUnauthorized
	f.mu.Unlock()
	write("third")
	_, _ = lease(s) // 401 with "second": read again before the next call
	f.mu.Lock()
	f.code = http.StatusOK
	f.mu.Unlock()
	*now = now.Add(RevokedRetry)
	_, _ = lease(s)
	if got, want := strings.Join(f.calls(), " "), "first first second second third"; got != want {
		t.Errorf("tokens sent: %s, want %s", got, want)
	}
}

// TestAHandshakeSlowerThanALeaseIsKeptForTheNextLease: on a loaded machine
// the TLS handshake can take longer than a lease may (quota.StoreTimeout).
// The lease that started it fails, but the handshake goes on and its
// connection serves the next lease; cut at the lease's timeout, every lease
// started a handshake again and none finished (docs/performance.md#shared-quota).
func TestAHandshakeSlowerThanALeaseIsKeptForTheNextLease(t *testing.T) {
	const handshake = 2 * quota.StoreTimeout
	f := newFakeEndpointTLS(t, http.StatusOK, &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		time.Sleep(handshake)
		return nil, nil
	}})
	s, _, _ := newStore(t, f, "tok", f.caPEM())
	leaseNow := func() (quota.LeaseReply, error) {
		ctx, cancel := context.WithTimeout(context.Background(), quota.StoreTimeout)
		defer cancel()
		return s.Lease(ctx, quota.Spec{Name: "partner"}, quota.LeaseRequest{Want: 2, Demand: 3})
	}
	if _, err := leaseNow(); err == nil {
		t.Fatalf("a lease during a handshake of %s succeeded within %s", handshake, quota.StoreTimeout)
	}
	time.Sleep(handshake) // the handshake the first lease started ends meanwhile
	if reply, err := leaseNow(); err != nil || reply.Granted != 2 {
		t.Errorf("the next lease = %+v, %v; want 2 send times over the connection the first one opened", reply, err)
	}
	if n := len(f.calls()); n != 1 {
		t.Errorf("the endpoint answered %d leases, want 1", n)
	}
}
