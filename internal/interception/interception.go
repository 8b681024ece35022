// Package interception installs the transparent-interception rules of a pod: in
// the current network namespace, outbound TCP to the intercepted ports is
// redirected (nat OUTPUT, REDIRECT) to the sidecar's transparent listener,
// except the sidecar's own traffic, recognised by its UID. docs/clients.md
// says when to use it and what it reaches.
//
// The rules are written over netlink with github.com/google/nftables (pure Go:
// the image needs no iptables binary), as one table of their own:
//
//	table ip retry_sidecar {
//	  chain output {
//	    type nat hook output priority dstnat; policy accept;
//	    meta skuid 65532 return                 # the sidecar's own upstream calls
//	    meta l4proto tcp tcp dport 80 redirect to :15006
//	    meta l4proto tcp tcp dport 8080 redirect to :15006
//	  }
//	}
//
// Install replaces the whole table in one netlink transaction, so running it
// twice leaves the same rules (never duplicates), and a reader never sees a
// half-written table. Only IPv4 is redirected: the transparent listener is an
// IPv4 loopback address, and IPv6 traffic redirected to ::1 would find nothing
// listening there.
package interception

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// Defaults of the redirect subcommand and the injector.
const (
	// DefaultPorts are the destination ports intercepted when a pod does not
	// name its own: plain HTTP.
	DefaultPorts = "80"
	// TLSPort is never intercepted: a TLS stream cannot be read, so it could
	// only be passed through, never retried. An app gets retries for an HTTPS
	// upstream by calling http:// and letting the sidecar originate TLS.
	TLSPort = 443
	// DefaultTo is the injected sidecar's --transparent-listen port.
	DefaultTo = v1alpha1.TransparentPort
	// DefaultExcludeUID is the injected sidecar's UID.
	DefaultExcludeUID = 65532
	// TableName is the nftables table (family ip) holding the rules.
	TableName = "retry_sidecar"
	// ChainName is its nat OUTPUT chain.
	ChainName = "output"
)

// Rules are what Install writes.
type Rules struct {
	// Ports are the intercepted destination ports (TCP).
	Ports []uint16
	// To is the local port the connections are redirected to (the sidecar's
	// --transparent-listen).
	To uint16
	// ExcludeUID is the sidecar's UID: its connections are never redirected,
	// or its own upstream calls would come back to it.
	ExcludeUID uint32
}

// ParsePorts reads a comma-separated list of TCP ports, as in "80,8080". It
// rejects an empty list, anything but decimal ports 1..65535, duplicates, and
// 443 (TLSPort).
func ParsePorts(s string) ([]uint16, error) {
	var ports []uint16
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 16)
		switch {
		case err != nil || n == 0:
			return nil, fmt.Errorf("%q is not a port: want comma-separated ports 1-65535 such as 80,8080", f)
		case n == TLSPort:
			return nil, errors.New("443 is never intercepted: TLS cannot be retried from outside the stream; call the upstream with an http:// URL and let the sidecar originate TLS (docs/clients.md)")
		case slices.Contains(ports, uint16(n)):
			return nil, fmt.Errorf("port %d is listed twice", n)
		}
		ports = append(ports, uint16(n))
	}
	return ports, nil
}

// Validate checks r before anything is written.
func (r Rules) Validate() error {
	if len(r.Ports) == 0 {
		return errors.New("--ports: at least one port is needed")
	}
	if r.To == 0 {
		return errors.New("--to: the sidecar's transparent listener port is needed (1-65535)")
	}
	if slices.Contains(r.Ports, r.To) {
		return fmt.Errorf("--ports: %d is the --to port itself; redirecting it would loop", r.To)
	}
	if r.ExcludeUID == 0 {
		return errors.New("--exclude-uid: the sidecar's non-zero UID is needed, or its own upstream calls would be redirected back to it")
	}
	return nil
}

// String is the rule set in nft's syntax, for logs and error messages.
func (r Rules) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s { chain %s { type nat hook output priority dstnat; meta skuid %d return;", TableName, ChainName, r.ExcludeUID)
	for _, p := range r.Ports {
		fmt.Fprintf(&b, " tcp dport %d redirect to :%d;", p, r.To)
	}
	b.WriteString(" } }")
	return b.String()
}
