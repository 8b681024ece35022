package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestEnsure(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts := []string{"webhook.ns.svc", "127.0.0.1"}
	ca1, err := Ensure(dir, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatalf("key pair: %v", err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca1)
	for _, h := range hosts {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("certificate does not verify for %s: %v", h, err)
		}
	}

	tests := map[string]struct {
		now     time.Time
		hosts   []string
		renewed bool
	}{
		"a valid certificate is kept":                    {now: now.Add(24 * time.Hour), hosts: hosts},
		"a certificate within 30 days of expiry renewed": {now: now.Add(340 * 24 * time.Hour), hosts: hosts, renewed: true},
		"a certificate missing a host is renewed":        {now: now, hosts: []string{"other.ns.svc"}, renewed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			for _, f := range []string{CACertFile, CertFile, KeyFile} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				if err := os.WriteFile(filepath.Join(d, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ca2, err := Ensure(d, tc.hosts, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if renewed := string(ca2) != string(ca1); renewed != tc.renewed {
				t.Fatalf("renewed = %v, want %v", renewed, tc.renewed)
			}
		})
	}
}
