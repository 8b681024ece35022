package rules

import (
	"strings"
	"testing"
	"time"
)

func TestFieldRules(t *testing.T) {
	tests := map[string]struct {
		got, want string
	}{
		"a retryable status passes":        {StatusProblem(503), ""},
		"a 404 lists the allowed statuses": {StatusProblem(404), "must be one of 408, 425, 429, 500, 502, 503, 504"},
		"ten attempts pass":                {AttemptsProblem(10), ""},
		"zero attempts give the range":     {AttemptsProblem(0), "must be between 1 and 10 (transmissions including the first)"},
		"a per-try timeout = deadline":     {PerTryTimeoutProblem(2*time.Second, 2*time.Second), "must be < deadline (2s)"},
		"a connect timeout = deadline":     {ConnectTimeoutProblem(2*time.Second, 2*time.Second), ""},
		"a connect timeout > deadline":     {ConnectTimeoutProblem(3*time.Second, 2*time.Second), "must be <= deadline (2s)"},
		"backoff max below base":           {BackoffMaxProblem(time.Second, 500*time.Millisecond), "must be >= backoff.base (1s)"},
		"a token header name passes":       {HeaderNameProblem("Idempotency-Key"), ""},
		"a header name with a space": {HeaderNameProblem("Idempotency Key"),
			"must be an HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~), such as Idempotency-Key"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestMethodProblem(t *testing.T) {
	tests := map[string]struct {
		method        string
		wantProblem   string
		wantForbidden bool
	}{
		"GET passes":                                       {"GET", "", false},
		"a lower-case method":                              {"get", "must be upper-case (GET); methods are case-sensitive", false},
		"a method with a space":                            {"GET /", "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE, or a gRPC method pattern such as /package.Service/Method", false},
		"a 33-byte method is too long":                     {"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG", "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE, or a gRPC method pattern such as /package.Service/Method", false},
		"POST is forbidden by method":                      {"POST", "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true},
		"PATCH is forbidden by method":                     {"PATCH", "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true},
		"a gRPC method passes":                             {"/shop.v1.Payments/GetPayment", "", false},
		"every method of a gRPC service passes":            {"/shop.v1.Payments/*", "", false},
		"a gRPC service without a package passes":          {"/Greeter/SayHello", "", false},
		"a 256-byte gRPC method passes":                    {"/" + strings.Repeat("a", 251) + ".S/M", "", false},
		"a 257-byte gRPC method is too long":               {"/" + strings.Repeat("a", 252) + ".S/M", GRPCMethodProblem + ", at most 256 bytes", false},
		"a gRPC method without its service is refused":     {"/GetPayment", GRPCMethodProblem, false},
		"a wildcard service is refused":                    {"/shop.v1.*/GetPayment", GRPCMethodProblem, false},
		"a partial wildcard method is refused":             {"/shop.v1.Payments/Get*", GRPCMethodProblem, false},
		"a trailing slash is refused":                      {"/shop.v1.Payments/", GRPCMethodProblem, false},
		"an empty package segment is refused":              {"/shop..Payments/Get", GRPCMethodProblem, false},
		"an identifier starting with a digit is refused":   {"/shop.1v.Payments/Get", GRPCMethodProblem, false},
		"a gRPC method with a query is refused":            {"/shop.v1.Payments/Get?x=1", GRPCMethodProblem, false},
		"a gRPC method with a trailing newline is refused": {"/shop.v1.Payments/Get\n", GRPCMethodProblem, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			problem, forbidden := MethodProblem(tt.method)
			if problem != tt.wantProblem || forbidden != tt.wantForbidden {
				t.Errorf("MethodProblem(%q) = %q, %v; want %q, %v", tt.method, problem, forbidden, tt.wantProblem, tt.wantForbidden)
			}
		})
	}
}

func TestRangeProblem(t *testing.T) {
	tests := map[string]struct {
		r    Range
		v    int64
		want string
	}{
		"the minimum passes":           {BurstRange, 1, ""},
		"the maximum passes":           {BurstRange, 10_000, ""},
		"one below the minimum":        {BurstRange, 0, "must be between 1 and 10000"},
		"one above the maximum":        {BurstRange, 10_001, "must be between 1 and 10000"},
		"a body of 16 MiB passes":      {MaxReplayBodyBytesRange, 16 << 20, ""},
		"a body of 16 MiB + 1 is over": {MaxReplayBodyBytesRange, 16<<20 + 1, "must be between 0 and 16777216"},
		"the largest quota passes":     {RequestsPerMinuteRange, 6_000_000, ""},
		"port 0 is refused":            {PortRange, 0, "must be between 1 and 65535"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.r.Problem(tt.v); got != tt.want {
				t.Errorf("%s.Problem(%d) = %q, want %q", tt.r.Path, tt.v, got, tt.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	const bad = "must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h)"
	tests := map[string]struct {
		in          string
		want        time.Duration
		wantProblem string
	}{
		"seconds":                           {"1.5s", 1500 * time.Millisecond, ""},
		"units combined":                    {"1h1m", 61 * time.Minute, ""},
		"one nanosecond":                    {"1ns", 1, ""},
		"the largest duration":              {"2562047h", 2562047 * time.Hour, ""},
		"zero is refused":                   {"0s", 0, bad},
		"half a nanosecond rounds to zero":  {"0.5ns", 0, bad},
		"a negative duration":               {"-1s", 0, bad},
		"a number without unit":             {"10", 0, bad},
		"the micro sign is not a unit here": {"1µs", 0, bad},
		"beyond time.Duration's range":      {"2562048h", 0, bad},
		"33 bytes are too long":             {"00000000000000000000000000000001s", 0, bad},
		"32 bytes with a leading zero pass": {"0000000000000000000000000000001s", time.Second, ""},
		"empty":                             {"", 0, bad},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, problem := ParseDuration(tt.in)
			if got != tt.want || problem != tt.wantProblem {
				t.Errorf("ParseDuration(%q) = %v, %q; want %v, %q", tt.in, got, problem, tt.want, tt.wantProblem)
			}
		})
	}
}

func TestNameAndHostRules(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	tests := map[string]struct {
		got, want string
	}{
		"a DNS label is a name":           {NameProblem("payments-api"), ""},
		"a 63-byte name passes":           {NameProblem(label63), ""},
		"a 64-byte name is too long":      {NameProblem(label63 + "a"), "must be a DNS-1123 label such as payments-api: 1-63 of a-z, 0-9 and '-', not starting or ending with '-'"},
		"an upper-case name":              {NameProblem("U"), "must be a DNS-1123 label such as payments-api: 1-63 of a-z, 0-9 and '-', not starting or ending with '-'"},
		"a DNS name":                      {DNSNameProblem("api.partner.example"), ""},
		"a DNS name with a 64-byte label": {DNSNameProblem(label63 + "a.example"), notHostName},
		"a host pattern of 262 bytes":     {HostPatternProblem(strings.Repeat("a", 262)), "longer than 261 bytes"},
		"an IPv6 zone":                    {HostPatternProblem("[fe80::1%eth0]"), "invalid IPv6 literal (zones are not allowed)"},
		"a port with a sign":              {HostPatternProblem("a.svc:+80"), "port must be a number between 1 and 65535"},
		"holdOnDeferral with retries":     {HoldOnDeferralProblem(2, 1), ""},
		"holdOnDeferral without retries":  {HoldOnDeferralProblem(1, 2), "needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred"},
		"an unknown jitter":               {JitterProblem("full"), "must be one of Full, Equal, None"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}
