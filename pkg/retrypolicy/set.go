package retrypolicy

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Set finds the policy for a request authority. It is immutable after NewSet and
// safe for concurrent use; on a config reload the sidecar builds a new Set and
// swaps it in atomically (a Registry keeps the per-upstream state across the swap).
//
// Precedence, most specific first:
//
//	pattern          authority "api.example:8443"   authority "api.example"
//	api.example:8443 match (1st)                    -
//	api.example:80   -                              match (1st: default port 80)
//	api.example      match (2nd)                    match (2nd)
//	*.example        -  ("*.suffix" needs a subdomain)
//	*.a.example      "x.a.example" prefers *.a.example over *.example (longest suffix)
type Set struct {
	exact    map[string]hostRule // by pattern: "host:port" and "host"
	suffixes []suffixRule        // longest suffix first
	policies []*Policy
}

// hostRule is a "host:port" or "host" pattern and its policy.
type hostRule struct {
	pattern string
	policy  *Policy
}

type suffixRule struct {
	suffix  string // ".example.com", leading dot included
	pattern string // "*.example.com"
	policy  *Policy
}

// NewSet indexes the policies' hosts. Two policies claiming the same host pattern,
// or sharing a Name (the key of their runtime state), is an error: the manager
// resolves conflicts before rendering, so a duplicate here is a broken config.
func NewSet(policies ...*Policy) (*Set, error) {
	s := &Set{exact: make(map[string]hostRule), policies: append([]*Policy(nil), policies...)}
	names := make(map[string]bool, len(policies))
	seenSuffix := make(map[string]*Policy)
	for _, p := range policies {
		if p == nil {
			return nil, fmt.Errorf("retrypolicy: nil policy")
		}
		if names[p.cfg.Name] {
			return nil, &FieldError{Field: "name", Detail: fmt.Sprintf("%q is used by two upstreams; names must be unique", p.cfg.Name)}
		}
		names[p.cfg.Name] = true
		for _, h := range p.cfg.Hosts {
			if strings.HasPrefix(h, "*.") {
				suf := h[1:]
				if q := seenSuffix[suf]; q != nil {
					return nil, hostConflict(h, q, p)
				}
				seenSuffix[suf] = p
				s.suffixes = append(s.suffixes, suffixRule{suffix: suf, pattern: h, policy: p})
				continue
			}
			if q := s.exact[h].policy; q != nil {
				return nil, hostConflict(h, q, p)
			}
			s.exact[h] = hostRule{pattern: h, policy: p}
		}
	}
	sort.SliceStable(s.suffixes, func(i, j int) bool { return len(s.suffixes[i].suffix) > len(s.suffixes[j].suffix) })
	return s, nil
}

func hostConflict(h string, a, b *Policy) error {
	return &FieldError{Field: "hosts", Detail: fmt.Sprintf("%q is claimed by upstreams %q and %q; a host may belong to one upstream only", h, a.cfg.Name, b.cfg.Name)}
}

// Policies returns the policies of the set in the order given to NewSet.
func (s *Set) Policies() []*Policy { return append([]*Policy(nil), s.policies...) }

// Match returns the policy for an authority ("host", "host:port", "[v6]:port"), or
// nil. An authority without a port is treated as port 80 (what an HTTP_PROXY
// client sends for http:// URLs); use MatchScheme when the scheme is known.
// Matching is case-insensitive and ignores a trailing dot in the host.
// It does not allocate unless the authority has upper-case letters.
func (s *Set) Match(authority string) *Policy { return s.MatchScheme("http", authority) }

// MatchScheme is Match with the default port taken from the scheme (https:
// 443, anything else: 80) when the authority has none.
func (s *Set) MatchScheme(scheme, authority string) *Policy {
	p, _ := s.MatchPattern(scheme, authority)
	return p
}

// MatchPattern is MatchScheme that also says which of the policy's host
// patterns matched ("" with a nil policy), by the same rule: what a tool
// explaining the match reports.
func (s *Set) MatchPattern(scheme, authority string) (p *Policy, pattern string) {
	if s == nil || authority == "" {
		return nil, ""
	}
	if hasUpper(authority) {
		authority = strings.ToLower(authority)
	}
	host, port, hasPort := splitAuthority(authority)
	if strings.HasSuffix(host, ".") {
		host = host[:len(host)-1]
		if hasPort {
			authority = host + ":" + port // rare: allocation acceptable
		} else {
			authority = host
		}
	}
	if hasPort {
		if r := s.exact[authority]; r.policy != nil {
			return r.policy, r.pattern
		}
	} else if len(s.exact) > 0 {
		def := ":80"
		if scheme == "https" {
			def = ":443"
		}
		if r := s.lookupHostPort(host, def); r.policy != nil {
			return r.policy, r.pattern
		}
	}
	if r := s.exact[host]; r.policy != nil {
		return r.policy, r.pattern
	}
	for _, r := range s.suffixes {
		if len(host) > len(r.suffix) && strings.HasSuffix(host, r.suffix) {
			return r.policy, r.pattern
		}
	}
	return nil, ""
}

// lookupHostPort looks up host+port without allocating for ordinary host lengths.
func (s *Set) lookupHostPort(host, port string) hostRule {
	var buf [300]byte
	if len(host)+len(port) > len(buf) {
		return s.exact[host+port]
	}
	n := copy(buf[:], host)
	n += copy(buf[n:], port)
	return s.exact[string(buf[:n])] // the compiler does not allocate for a map index
}

// MatchRequest matches an outgoing (client) or proxied request: the authority
// is r.URL.Host when the URL is absolute (absolute-form, as HTTP_PROXY clients
// send it), else r.Host.
func (s *Set) MatchRequest(r *http.Request) *Policy {
	if r.URL != nil && r.URL.Host != "" {
		return s.MatchScheme(r.URL.Scheme, r.URL.Host)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return s.MatchScheme(scheme, r.Host)
}

// splitAuthority splits "host:port" / "[v6]:port" / "host". The port is returned
// without the colon.
func splitAuthority(a string) (host, port string, hasPort bool) {
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return a, "", false
		}
		if end+1 < len(a) && a[end+1] == ':' {
			return a[:end+1], a[end+2:], true
		}
		return a[:end+1], "", false
	}
	i := strings.LastIndexByte(a, ':')
	if i < 0 || strings.IndexByte(a, ':') != i {
		return a, "", false
	}
	return a[:i], a[i+1:], true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
