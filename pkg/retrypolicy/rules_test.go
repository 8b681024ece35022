package retrypolicy

import (
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
		"GET passes":                   {"GET", "", false},
		"a lower-case method":          {"get", "must be upper-case (GET); methods are case-sensitive", false},
		"a method with a space":        {"GET /", "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE", false},
		"a 33-byte method is too long": {"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG", "must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE", false},
		"POST is forbidden by method":  {"POST", "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true},
		"PATCH is forbidden by method": {"PATCH", "POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed", true},
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
