package sidecar

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
)

// errLoop is a request whose target is the sidecar itself: forwarding it would
// recurse until file descriptors or memory run out. It is answered 508.
var errLoop = errors.New("retry-sidecar: request addressed to the proxy itself")

// selfAddrs are the sidecar's own listening addresses, the targets a request
// must never be forwarded to (docs/sidecar.md#loops).
type selfAddrs struct {
	ports map[string]bool         // listening ports, as strings ("15001")
	addrs map[netip.AddrPort]bool // exact listening addresses
}

func newSelfAddrs(listeners ...net.Addr) *selfAddrs {
	s := &selfAddrs{ports: map[string]bool{}, addrs: map[netip.AddrPort]bool{}}
	for _, a := range listeners {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			s.addrs[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
			s.ports[itoa(int(ap.Port()))] = true
		}
	}
	return s
}

// targets reports whether an authority (host:port, or host with defaultPort)
// names one of the sidecar's ports on this machine, whatever the spelling:
// localhost and *.localhost, any loopback address (127.0.0.0/8, ::1), the
// unspecified addresses 0.0.0.0 and ::, and IPv4-mapped forms of these
// ([::ffff:127.0.0.1]). Names that merely resolve to a loopback address are
// caught when they are dialled (dialContext).
func (s *selfAddrs) targets(authority, defaultPort string) bool {
	if s == nil {
		return false
	}
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		host, port = strings.Trim(authority, "[]"), defaultPort
	}
	if port == "" {
		port = defaultPort
	}
	if !s.ports[strings.TrimLeft(port, "0")] && !s.ports[port] {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // IPv6 zone
		host = host[:i]
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified()
}

// dialContext wraps a dialer so that a connection which lands on one of the
// sidecar's own listeners is closed at once and reported as errLoop: the last
// line of defence for names that resolve to loopback.
func (s *selfAddrs) dialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil || s == nil {
			return c, err
		}
		if ap, perr := netip.ParseAddrPort(c.RemoteAddr().String()); perr == nil &&
			s.addrs[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] {
			c.Close()
			return nil, errLoop
		}
		return c, nil
	}
}
