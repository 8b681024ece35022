package retrypolicy

import (
	"net/http"
	"net/url"
	"testing"
)

func TestSetMatch(t *testing.T) {
	pol := func(name string, hosts ...string) *Policy {
		return compile(t, func(c *Config) { c.Name = name; c.Hosts = hosts })
	}
	exactPort := pol("exact-port", "api.example:8443")
	defPort := pol("default-port", "api.example:80")
	tlsPort := pol("tls-port", "api.example:443")
	exact := pol("exact", "api.example", "10.0.0.1", "[::1]")
	wide := pol("wide", "*.example")
	narrow := pol("narrow", "*.a.example")
	s, err := NewSet(wide, exactPort, exact, narrow, defPort, tlsPort)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		scheme, authority string
		want              *Policy
		pattern           string // the one that matched
	}{
		"exact host:port beats exact host":                 {"http", "api.example:8443", exactPort, "api.example:8443"},
		"exact host matches any other port":                {"http", "api.example:9000", exact, "api.example"},
		"no port means port 80 for http":                   {"http", "api.example", defPort, "api.example:80"},
		"no port means port 443 for https":                 {"https", "api.example", tlsPort, "api.example:443"},
		"matching ignores case":                            {"http", "API.Example:8443", exactPort, "api.example:8443"},
		"a trailing dot is the same host":                  {"http", "api.example.:8443", exactPort, "api.example:8443"},
		"longest suffix wins":                              {"http", "x.a.example", narrow, "*.a.example"},
		"a shorter suffix matches other subdomains":        {"http", "b.example:1234", wide, "*.example"},
		"a suffix pattern does not match the suffix alone": {"http", "example", nil, ""},
		"a suffix must match at a label boundary":          {"http", "xexample", nil, ""},
		"an IPv4 address matches exactly":                  {"http", "10.0.0.1:8080", exact, "10.0.0.1"},
		"an IPv6 literal matches exactly":                  {"http", "[::1]:8080", exact, "[::1]"},
		"an unknown host has no policy":                    {"http", "other.test", nil, ""},
		"an empty authority has no policy":                 {"http", "", nil, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := s.MatchScheme(tc.scheme, tc.authority); got != tc.want {
				t.Fatalf("MatchScheme(%q, %q) = %v, want %v", tc.scheme, tc.authority, name0(got), name0(tc.want))
			}
			if got, pattern := s.MatchPattern(tc.scheme, tc.authority); got != tc.want || pattern != tc.pattern {
				t.Fatalf("MatchPattern(%q, %q) = %v, %q; want %v, %q", tc.scheme, tc.authority, name0(got), pattern, name0(tc.want), tc.pattern)
			}
		})
	}
	r := &http.Request{URL: &url.URL{Scheme: "http", Host: "api.example:8443", Path: "/"}, Host: "ignored.test"}
	if got := s.MatchRequest(r); got != exactPort {
		t.Fatalf("MatchRequest(absolute-form) = %v, want exact-port", name0(got))
	}
	r = &http.Request{URL: &url.URL{Path: "/"}, Host: "q.a.example"}
	if got := s.MatchRequest(r); got != narrow {
		t.Fatalf("MatchRequest(origin-form) = %v, want narrow", name0(got))
	}
	var nilSet *Set
	if nilSet.Match("api.example") != nil {
		t.Fatal("a nil Set matched")
	}
}

func name0(p *Policy) string {
	if p == nil {
		return "<nil>"
	}
	return p.Name()
}

func TestNewSetRejectsConflicts(t *testing.T) {
	a := compile(t, func(c *Config) { c.Name = "a"; c.Hosts = []string{"x.example", "*.y.example"} })
	b := compile(t, func(c *Config) { c.Name = "b"; c.Hosts = []string{"x.example"} })
	c := compile(t, func(c *Config) { c.Name = "c"; c.Hosts = []string{"*.y.example"} })
	d := compile(t, func(c *Config) { c.Name = "a"; c.Hosts = []string{"z.example"} })
	tests := map[string]struct {
		ps   []*Policy
		want string
	}{
		"two upstreams claim one host":   {[]*Policy{a, b}, `hosts: "x.example" is claimed by upstreams "a" and "b"; a host may belong to one upstream only`},
		"two upstreams claim one suffix": {[]*Policy{a, c}, `hosts: "*.y.example" is claimed by upstreams "a" and "c"; a host may belong to one upstream only`},
		"two upstreams share a name":     {[]*Policy{a, d}, `name: "a" is used by two upstreams; names must be unique`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := NewSet(tc.ps...)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("NewSet error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSetMatchDoesNotAllocate(t *testing.T) {
	p := compile(t, func(c *Config) { c.Hosts = []string{"api.example:80", "*.svc"} })
	s, _ := NewSet(p)
	if n := testing.AllocsPerRun(100, func() { s.Match("api.example"); s.Match("a.b.svc:8080") }); n != 0 {
		t.Fatalf("Match allocates %v times", n)
	}
}
