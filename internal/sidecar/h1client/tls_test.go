package h1client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// tlsServer is an httptest TLS server (its own certificate for example.com and
// 127.0.0.1) and an origin that trusts it.
func tlsServer(t *testing.T, h2 bool, h http.HandlerFunc) (*httptest.Server, *TLSOrigin) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	addr := srv.Listener.Addr().String()
	return srv, &TLSOrigin{Addr: addr, Config: &tls.Config{ServerName: "example.com", RootCAs: pool}, Key: "tls:" + addr}
}

// Many goroutines share the pools (HTTP/1.1 idle list, HTTP/2 connection list)
// under the race detector; every request gets its own answer.
func TestRoundTripTLSConcurrent(t *testing.T) {
	for name, h2 := range map[string]bool{"HTTP/1.1": false, "HTTP/2": true} {
		t.Run(name, func(t *testing.T) {
			_, o := tlsServer(t, h2, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, r.URL.Path+" "+r.Proto)
			})
			tr := &Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			want := "HTTP/1.1"
			if h2 {
				want = "HTTP/2.0"
			}
			var wg sync.WaitGroup
			errs := make(chan error, 400)
			for g := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						path := "/" + string(rune('a'+g)) + string(rune('a'+i))
						req, _ := http.NewRequest(http.MethodGet, "http://upstream.example"+path, nil)
						resp, err := tr.RoundTripTLS(req, o)
						if err != nil {
							errs <- err
							continue
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil || string(b) != path+" "+want {
							errs <- errors.New("got " + string(b) + ", want " + path + " " + want)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestRoundTripTLSUntrustedCertificateIsNotAConnectFailure(t *testing.T) {
	_, o := tlsServer(t, false, func(w http.ResponseWriter, r *http.Request) {})
	o.Config = &tls.Config{ServerName: "example.com"} // system roots: the test certificate is not among them
	tr := &Transport{}
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.example/", nil)
	_, err := tr.RoundTripTLS(req, o)
	var cv *tls.CertificateVerificationError
	if !errors.Is(err, retryhttp.ErrUntrustedCertificate) || !errors.As(err, &cv) {
		t.Fatalf("err = %v, want ErrUntrustedCertificate wrapping the verification error", err)
	}
}
