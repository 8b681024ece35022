package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// TLSUpstream is the TLS origination of one upstream (docs/tls.md): the app
// calls http://host/… and the sidecar dials host:port over TLS, verifying the
// certificate for hostname against roots.
type TLSUpstream struct {
	hostname string         // SNI and verified name; "" = the request's host
	port     string         // "" = the request's explicit port, else 443
	roots    *x509.CertPool // nil = the system roots (SSL_CERT_FILE, SSL_CERT_DIR honoured)
	id       string         // names hostname, port and roots, for the pool key

	mu      sync.Mutex
	origins map[originKey]*h1client.TLSOrigin
}

// originKey is what an origin depends on: the authority the policy matched
// and the address the request is for.
type originKey struct{ authority, target string }

// maxOriginsPerUpstream bounds the per-authority cache of an upstream (a
// "*.suffix" upstream may see many names); past it origins are built per request.
const maxOriginsPerUpstream = 256

func newTLSUpstream(u policyset.Upstream) (*TLSUpstream, error) {
	t := u.TLS
	roots, err := policyset.CertPool(u.CABundle)
	if err != nil {
		return nil, err
	}
	if len(t.CACertificateRefs) > 0 && roots == nil {
		return nil, errors.New("tls.caCertificateRefs: the rendered caBundle is empty (resolved by the manager, or by a ConfigMap document next to a --policy-file)")
	}
	o := &TLSUpstream{roots: roots, origins: map[originKey]*h1client.TLSOrigin{}}
	if t.Hostname != nil {
		o.hostname = *t.Hostname
	}
	if t.Port != nil {
		o.port = strconv.Itoa(int(*t.Port))
	}
	sum := sha256.Sum256([]byte(o.hostname + "\x00" + o.port + "\x00" + u.CABundle))
	o.id = hex.EncodeToString(sum[:8])
	return o, nil
}

// Origin is where and how a request is sent whose policy matched authority
// and whose URL names target (host:port):
//
//	SNI, verified name   tls.hostname, else authority's host
//	port                 tls.port, else authority's explicit port, else 443
//	host dialled         target's host
//
// Through the forward proxy target is authority (api.example:80 dials
// api.example:443); through the transparent listener it is the connection's
// original destination (10.0.0.7:80 with Host: api.example dials 10.0.0.7:443,
// verified as api.example), the address the app chose (docs/clients.md#tls).
func (u *TLSUpstream) Origin(authority, target string) *h1client.TLSOrigin {
	key := originKey{authority, target}
	u.mu.Lock()
	o := u.origins[key]
	u.mu.Unlock()
	if o != nil {
		return o
	}
	host, port := splitAuthority(authority)
	if u.port != "" {
		port = u.port
	} else if port == "" {
		port = "443"
	}
	sni := u.hostname
	if sni == "" {
		sni = strings.TrimSuffix(strings.ToLower(host), ".")
	}
	dialHost := host
	if target != authority {
		dialHost, _ = splitAuthority(target)
	}
	addr := net.JoinHostPort(dialHost, port)
	o = &h1client.TLSOrigin{
		Addr:   addr,
		Config: &tls.Config{ServerName: sni, RootCAs: u.roots, MinVersion: tls.VersionTLS12},
		Key:    "tls:" + addr + "|" + sni + "|" + u.id,
	}
	u.mu.Lock()
	if len(u.origins) < maxOriginsPerUpstream {
		u.origins[key] = o
	}
	u.mu.Unlock()
	return o
}

// splitAuthority is host and port of "host:port", "[v6]:port" or "host"
// (port "" when there is none).
func splitAuthority(authority string) (host, port string) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		return strings.Trim(authority, "[]"), ""
	}
	return host, port
}

// tlsUpstreams builds the TLS origination of every policy whose upstream
// has tls; an upstream whose CA bundle does not parse refuses the configuration.
func tlsUpstreams(origin map[*retrypolicy.Policy]policyset.Upstream) (map[*retrypolicy.Policy]*TLSUpstream, error) {
	out := map[*retrypolicy.Policy]*TLSUpstream{}
	for p, u := range origin {
		if u.TLS == nil {
			continue
		}
		t, err := newTLSUpstream(u)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", p.Name(), err)
		}
		out[p] = t
	}
	return out, nil
}
