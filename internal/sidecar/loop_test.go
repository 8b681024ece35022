package sidecar

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestSelfAddrsTargets(t *testing.T) {
	self := newSelfAddrs(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 15001})
	tests := map[string]struct {
		authority, defaultPort string
		want                   bool
	}{
		"127.0.0.1 on the proxy port":              {"127.0.0.1:15001", "80", true},
		"localhost on the proxy port":              {"localhost:15001", "80", true},
		"LOCALHOST. with a trailing dot":           {"LOCALHOST.:15001", "80", true},
		"a *.localhost name":                       {"app.localhost:15001", "80", true},
		"0.0.0.0 on the proxy port":                {"0.0.0.0:15001", "80", true},
		"[::1] on the proxy port":                  {"[::1]:15001", "80", true},
		"[::] on the proxy port":                   {"[::]:15001", "80", true},
		"IPv4-mapped loopback":                     {"[::ffff:127.0.0.1]:15001", "80", true},
		"another loopback address":                 {"127.0.0.2:15001", "80", true},
		"a leading zero in the port":               {"127.0.0.1:015001", "80", true},
		"the default port when it is the proxy's":  {"localhost", "15001", true},
		"loopback on another port":                 {"127.0.0.1:8080", "80", false},
		"loopback without a port, default 80":      {"localhost", "80", false},
		"a remote host on the proxy port":          {"api.example:15001", "80", false},
		"a non-loopback address on the proxy port": {"10.1.2.3:15001", "80", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := self.targets(tc.authority, tc.defaultPort); got != tc.want {
				t.Fatalf("targets(%q, %q) = %v, want %v", tc.authority, tc.defaultPort, got, tc.want)
			}
		})
	}
}

// TestSelfAddrsDialCatchesNamesThatResolveToTheProxy: a dial that lands on
// the proxy's own listener is closed and reported as errLoop.
func TestSelfAddrsDialCatchesNamesThatResolveToTheProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	dial := newSelfAddrs(ln.Addr()).dialContext((&net.Dialer{}).DialContext)
	if _, err := dial(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, errLoop) {
		t.Fatalf("dial to the proxy itself = %v, want errLoop", err)
	}
	c, err := dial(context.Background(), "tcp", other.Addr().String())
	if err != nil {
		t.Fatalf("dial to another listener = %v", err)
	}
	c.Close()
}
