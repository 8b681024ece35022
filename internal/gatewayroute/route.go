package gatewayroute

import (
	"fmt"
	"net/http"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
)

// Route is what an upstream rendered from a Gateway API route rule adds to
// its retry rules: which requests to its
// hosts it applies to. Such an upstream is not matched by host alone: every
// rule of every route for a host is one entry of the host's RouteTable, and a
// request gets the first entry, in Gateway API's precedence, whose matches it
// meets (docs/gateway-api.md#precedence).
type Route struct {
	// Kind, Namespace and Name name the route ("HTTPRoute", "shop",
	// "payments-retries"); Rule is the index of its rule.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Rule      int    `json:"rule"`
	// Consumer: a route in another namespace than its parent Service's, for
	// callers in its own namespace only. Where one applies to a host, the
	// producer routes do not (GAMMA's rule).
	Consumer bool `json:"consumer,omitempty"`
	// Created is the route's creation time, Unix seconds: the older route
	// wins a tie in precedence.
	Created int64 `json:"created,omitempty"`
	// Matches are ORed; a rule without matches matches every request (a
	// PathPrefix "/").
	Matches []RouteMatch `json:"matches,omitempty"`
}

// RouteMatch is one HTTPRouteMatch: every condition given must hold.
type RouteMatch struct {
	// PathType is Exact, PathPrefix or RegularExpression; Path its value.
	PathType    string       `json:"pathType"`
	Path        string       `json:"path"`
	Method      string       `json:"method,omitempty"`
	Headers     []ValueMatch `json:"headers,omitempty"`
	QueryParams []ValueMatch `json:"queryParams,omitempty"`
}

// ValueMatch is a header or query parameter match: Type Exact or
// RegularExpression. Header names are matched case-insensitively, query
// parameter names exactly.
type ValueMatch struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

// The match types of Gateway API.
const (
	MatchExact             = "Exact"
	MatchPathPrefix        = "PathPrefix"
	MatchRegularExpression = "RegularExpression"
)

// MaxRegexLength and maxRegexInstructions bound what a route's regular
// expression may cost per request: Go's regexp runs in time linear in the
// input, and these bound the factor (docs/gateway-api.md#bad-input).
const (
	MaxRegexLength       = 1024
	maxRegexInstructions = 2000
)

// CompileRegex compiles a route's regular expression (RE2 syntax, anchored:
// it must match the whole value, as Gateway API's RegularExpression does in
// every conformant implementation); the error says what is wrong, for a
// message that names the field.
func CompileRegex(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexLength {
		return nil, fmt.Errorf("must be at most %d characters (got %d)", MaxRegexLength, len(expr))
	}
	anchored := "^(?:" + expr + ")$"
	re, err := syntax.Parse(anchored, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("does not compile: %w", err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("does not compile: %w", err)
	}
	if n := len(prog.Inst); n > maxRegexInstructions {
		return nil, fmt.Errorf("is too costly: %d instructions, at most %d (a repetition count multiplies its operand)", n, maxRegexInstructions)
	}
	return regexp.Compile(anchored)
}

// rankOf orders matches by Gateway API's precedence: an Exact path before a
// PathPrefix, a longer prefix before a shorter one, a regular expression
// after every prefix (its precedence is the implementation's choice); then a
// method, more headers, more query parameters. Lower ranks first.
func rankOf(m RouteMatch) [5]int {
	kind := 1
	switch m.PathType {
	case MatchExact:
		kind = 0
	case MatchRegularExpression:
		kind = 2
	}
	method := 1
	if m.Method != "" {
		method = 0
	}
	return [5]int{kind, -len(m.Path), method, -len(m.Headers), -len(m.QueryParams)}
}

// compiledMatch is a RouteMatch ready to test requests.
type compiledMatch struct {
	RouteMatch
	path    *regexp.Regexp
	headers []compiledValue
	query   []compiledValue
}

type compiledValue struct {
	ValueMatch
	re *regexp.Regexp
}

func compileMatch(m RouteMatch) (compiledMatch, error) {
	c := compiledMatch{RouteMatch: m}
	if m.PathType == MatchRegularExpression {
		re, err := CompileRegex(m.Path)
		if err != nil {
			return c, fmt.Errorf("path.value: %w", err)
		}
		c.path = re
	}
	var err error
	if c.headers, err = compileValues("headers", m.Headers); err != nil {
		return c, err
	}
	c.query, err = compileValues("queryParams", m.QueryParams)
	return c, err
}

func compileValues(field string, vs []ValueMatch) ([]compiledValue, error) {
	out := make([]compiledValue, len(vs))
	for i, v := range vs {
		out[i].ValueMatch = v
		if v.Type != MatchRegularExpression {
			continue
		}
		re, err := CompileRegex(v.Value)
		if err != nil {
			return nil, fmt.Errorf("%s[%d].value: %w", field, i, err)
		}
		out[i].re = re
	}
	return out, nil
}

// matches reports whether r meets every condition of m.
func (m *compiledMatch) matches(r *http.Request) bool {
	if m.Method != "" && m.Method != r.Method {
		return false
	}
	if !m.pathMatches(r.URL.Path) {
		return false
	}
	for i := range m.headers {
		h := &m.headers[i]
		if !h.meets(r.Header.Values(h.Name)) {
			return false
		}
	}
	if len(m.query) == 0 {
		return true
	}
	q := r.URL.Query()
	for i := range m.query {
		v := &m.query[i]
		if !v.meets(q[v.Name]) {
			return false
		}
	}
	return true
}

func (m *compiledMatch) pathMatches(p string) bool {
	if p == "" {
		p = "/"
	}
	switch m.PathType {
	case MatchExact:
		return p == m.Path
	case MatchRegularExpression:
		return m.path.MatchString(p)
	}
	// PathPrefix matches whole segments: "/foo" matches "/foo" and
	// "/foo/bar", not "/foobar" (Gateway API).
	prefix := strings.TrimSuffix(m.Path, "/")
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

// meets checks the first value of a header or parameter, as Gateway API
// specifies for repeated ones.
func (v *compiledValue) meets(values []string) bool {
	if len(values) == 0 {
		return false
	}
	if v.re != nil {
		return v.re.MatchString(values[0])
	}
	return values[0] == v.Value
}

// routeEntry is one match of one route rule, bound to the rule's compiled
// retry rules (of type P: the table is built before the policies are
// compiled into a Set).
type routeEntry[P any] struct {
	match  compiledMatch
	route  *Route
	index  int // the match's index in the rule
	policy P
}

// RouteTable is every route rule for each host, in precedence order once
// sorted (Sort). Build it with Add, then Sort; then it is read-only.
type RouteTable[P any] struct {
	hosts map[string][]routeEntry[P]
}

// Add adds the matches of a rule for its hosts (lower case; "host" for every
// port, "host:port" for one).
func (t *RouteTable[P]) Add(hosts []string, route *Route, policy P) error {
	matches := route.Matches
	if len(matches) == 0 {
		matches = []RouteMatch{{PathType: MatchPathPrefix, Path: "/"}}
	}
	if t.hosts == nil {
		t.hosts = map[string][]routeEntry[P]{}
	}
	for i, m := range matches {
		cm, err := compileMatch(m)
		if err != nil {
			return fmt.Errorf("%s %s/%s: spec.rules[%d].matches[%d].%w", route.Kind, route.Namespace, route.Name, route.Rule, i, err)
		}
		for _, h := range hosts {
			t.hosts[h] = append(t.hosts[h], routeEntry[P]{match: cm, route: route, index: i, policy: policy})
		}
	}
	return nil
}

// Sort puts each host's entries in precedence order and, where a consumer
// route applies to a host, drops the producer routes.
func (t *RouteTable[P]) Sort() {
	for h, es := range t.hosts {
		if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
			es = append(es, t.hosts[h[:i]]...) // a route for every port applies to this one too
		}
		if slices.ContainsFunc(es, func(e routeEntry[P]) bool { return e.route.Consumer }) {
			es = slices.DeleteFunc(es, func(e routeEntry[P]) bool { return !e.route.Consumer })
		}
		slices.SortStableFunc(es, compareEntries[P])
		t.hosts[h] = es
	}
}

func compareEntries[P any](a, b routeEntry[P]) int {
	ra, rb := rankOf(a.match.RouteMatch), rankOf(b.match.RouteMatch)
	if c := slices.Compare(ra[:], rb[:]); c != 0 {
		return c
	}
	if a.route.Created != b.route.Created {
		return int(a.route.Created - b.route.Created)
	}
	if c := strings.Compare(a.route.Namespace+"/"+a.route.Name, b.route.Namespace+"/"+b.route.Name); c != 0 {
		return c
	}
	if a.route.Rule != b.route.Rule {
		return a.route.Rule - b.route.Rule
	}
	return a.index - b.index
}

// Has reports whether any route applies to the host of authority.
func (t *RouteTable[P]) Has(authority string) bool {
	return t != nil && len(t.entries(authority)) > 0
}

// Match returns the policy of the first rule, in precedence, that r meets
// among the routes for authority ("host:port"; scheme gives the default
// port), and the route that gave it; ok is false when none does (the request
// passes through without retries).
func (t *RouteTable[P]) Match(authority string, r *http.Request) (p P, route *Route, ok bool) {
	if t == nil {
		return p, nil, false
	}
	for _, e := range t.entries(authority) {
		if e.match.matches(r) {
			return e.policy, e.route, true
		}
	}
	return p, nil, false
}

// entries are the entries for an authority: those of "host:port", else
// those of "host".
func (t *RouteTable[P]) entries(authority string) []routeEntry[P] {
	a := strings.TrimSuffix(strings.ToLower(authority), ".")
	host := a
	if i := strings.LastIndexByte(a, ':'); i >= 0 && !strings.HasSuffix(a, "]") {
		host = a[:i]
	} else {
		a += ":80" // what an HTTP_PROXY client leaves out for http:// URLs
	}
	if es, ok := t.hosts[a]; ok {
		return es
	}
	return t.hosts[host]
}
