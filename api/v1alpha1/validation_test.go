package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func validPolicy(mutate func(*RetryPolicy)) *RetryPolicy {
	p := &RetryPolicy{Spec: RetryPolicySpec{Upstreams: []Upstream{
		{Name: "payments-api", Hosts: []string{"payments.shop.svc", "api.partner.example:8443"}},
		{Name: "catalogue", Hosts: []string{"*.catalogue.shop.svc"}},
	}}}
	SetDefaults(p)
	if mutate != nil {
		mutate(p)
	}
	return p
}

// validateRulesBeyondCELCases are the cases of TestValidateRulesBeyondCEL.
var validateRulesBeyondCELCases = map[string]struct {
	mutate func(*RetryPolicy)
	want   string // "" = valid; else the full first error
}{
	"a defaulted policy with exact, host:port and wildcard hosts is valid": {},
	"an IPv4 literal with a port is a valid host": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"10.0.0.7:8080"} },
	},
	"a bracketed IPv6 literal with a port is a valid host": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"[fd00::7]:8080"} },
	},
	"an upper-case host is rejected with its lower-case form": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"Payments.shop.svc"} },
		want:   `spec.upstreams[0].hosts[0]: Invalid value: "Payments.shop.svc": must be lower-case (payments.shop.svc); must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"a host with a scheme is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"http://payments"} },
		want:   `spec.upstreams[0].hosts[0]: Invalid value: "http://payments": port must be a number between 1 and 65535; must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"a port above 65535 is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"payments.shop.svc:70000"} },
		want:   `spec.upstreams[0].hosts[0]: Invalid value: "payments.shop.svc:70000": port must be a number between 1 and 65535; must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"an empty port is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"payments.shop.svc:"} },
		want:   `spec.upstreams[0].hosts[0]: Invalid value: "payments.shop.svc:": empty port; must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"an unbracketed IPv6 literal is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].Hosts = []string{"fd00::7"} },
		want:   `spec.upstreams[0].hosts[0]: Invalid value: "fd00::7": IPv6 literals need brackets, as in [fd00::7]:8080; must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"a wildcard in the middle of a host is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[1].Hosts = []string{"api.*.example"} },
		want:   `spec.upstreams[1].hosts[0]: Invalid value: "api.*.example": a wildcard is only allowed as the whole first label ("*.suffix"); must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"a wildcard with a port is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[1].Hosts = []string{"*.example:443"} },
		want:   `spec.upstreams[1].hosts[0]: Invalid value: "*.example:443": a wildcard is only allowed as the whole first label ("*.suffix") and takes no port; must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"a partial-label wildcard is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[1].Hosts = []string{"*api.example"} },
		want:   `spec.upstreams[1].hosts[0]: Invalid value: "*api.example": a wildcard is only allowed as the whole first label ("*.suffix"); must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`,
	},
	"the same host claimed by two upstreams of one policy is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[1].Hosts = []string{"payments.shop.svc"} },
		want:   `spec.upstreams[1].hosts[0]: Duplicate value: "payments.shop.svc is already claimed by spec.upstreams[0].hosts[0]; a host may belong to one upstream of a policy"`,
	},
	"a header name with a space is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].IdempotencyKey = &IdempotencyKey{Header: "Idempotency Key"} },
		want:   "spec.upstreams[0].idempotencyKey.header: Invalid value: \"Idempotency Key\": must be an HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~), such as Idempotency-Key",
	},
	"a lower-case method is rejected with its upper-case form": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].ReplayableMethods = []string{"get"} },
		want:   `spec.upstreams[0].replayableMethods[0]: Invalid value: "get": must be upper-case (GET); methods are case-sensitive`,
	},
	"a method that is not a token is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].ReplayableMethods = []string{"GET /"} },
		want:   `spec.upstreams[0].replayableMethods[0]: Invalid value: "GET /": must be an HTTP method token such as GET, HEAD, OPTIONS, PUT or DELETE, or a gRPC method pattern such as /package.Service/Method`,
	},
	"gRPC method patterns beside HTTP methods are valid": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].ReplayableMethods = []string{"GET", "/shop.v1.Payments/GetPayment", "/shop.v1.Catalogue/*", "/Greeter/SayHello"}
		},
	},
	"a gRPC method pattern with a wildcard service is rejected with the allowed shapes": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].ReplayableMethods = []string{"GET", "/shop.v1.*/Get"} },
		want:   `spec.upstreams[0].replayableMethods[1]: Invalid value: "/shop.v1.*/Get": must be a gRPC method pattern, /package.Service/Method or /package.Service/* (protobuf identifiers: letters, digits and '_')`,
	},
	"a gRPC method pattern without a method is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].ReplayableMethods = []string{"/shop.v1.Payments"} },
		want:   `spec.upstreams[0].replayableMethods[0]: Invalid value: "/shop.v1.Payments": must be a gRPC method pattern, /package.Service/Method or /package.Service/* (protobuf identifiers: letters, digits and '_')`,
	},
	"a gRPC method listed twice is rejected": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].ReplayableMethods = []string{"/shop.v1.Payments/*", "/shop.v1.Payments/*"}
		},
		want: `spec.upstreams[0].replayableMethods[1]: Duplicate value: "/shop.v1.Payments/*"`,
	},
	"every gRPC status code but OK is valid": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].RetryOn.GRPCStatusCodes = GRPCStatusCodes() },
	},
	"OK as a retried gRPC status is rejected with the allowed names": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].RetryOn.GRPCStatusCodes = []GRPCStatusCode{GRPCUnavailable, "OK"}
		},
		want: `spec.upstreams[0].retryOn.grpcStatusCodes[1]: Unsupported value: "OK": supported values: "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"`,
	},
	"a gRPC status in grpc-go's spelling is rejected": {
		mutate: func(p *RetryPolicy) { p.Spec.Upstreams[0].RetryOn.GRPCStatusCodes = []GRPCStatusCode{"Unavailable"} },
		want:   `spec.upstreams[0].retryOn.grpcStatusCodes[0]: Unsupported value: "Unavailable": supported values: "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"`,
	},
	"a gRPC status listed twice is rejected": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].RetryOn.GRPCStatusCodes = []GRPCStatusCode{GRPCUnavailable, GRPCAborted, GRPCUnavailable}
		},
		want: `spec.upstreams[0].retryOn.grpcStatusCodes[2]: Duplicate value: "UNAVAILABLE"`,
	},
	"an invalid pod selector is rejected": {
		mutate: func(p *RetryPolicy) {
			p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "not valid!"}}
		},
		want: `spec.podSelector.matchLabels: Invalid value: "not valid!": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
	},
	"pacing with rate-limit headers and holdOnDeferral is valid": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].Pacing = &Pacing{RateLimitHeaders: ptr(true), HoldOnDeferral: ptr(true)}
		},
	},
	"rate-limit headers with a single attempt are valid: pacing needs no retry": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].MaxAttempts = ptr[int32](1)
			p.Spec.Upstreams[0].Pacing = &Pacing{RateLimitHeaders: ptr(true), HoldOnDeferral: ptr(false)}
		},
	},
	"holdOnDeferral without a retried status is rejected: nothing is ever deferred": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[0].RetryOn.StatusCodes = []StatusCode{}
			p.Spec.Upstreams[0].Pacing = &Pacing{HoldOnDeferral: ptr(true)}
		},
		want: `spec.upstreams[0].pacing.holdOnDeferral: Invalid value: true: needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred`,
	},
	"a backoff max below its base names both values": {
		mutate: func(p *RetryPolicy) {
			p.Spec.Upstreams[1].Backoff.Base, p.Spec.Upstreams[1].Backoff.Max = ptr(Duration("2s")), ptr(Duration("1s"))
		},
		want: `spec.upstreams[1].backoff.max: Invalid value: "1s": must be >= backoff.base (2s)`,
	},
}

// The rules below are the ones the CRD schema and CEL cannot express; only the Go
// function (webhook, reconciler, sidecar policy files) enforces them.
func TestValidateRulesBeyondCEL(t *testing.T) {
	tests := validateRulesBeyondCELCases
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := Validate(validPolicy(tc.mutate))
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("want %q, got no error", tc.want)
			}
			if got := errs[0].Error(); got != tc.want {
				t.Errorf("first error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

// The names of the gRPC status codes are their numbers on the wire, in order.
func TestGRPCStatusCodeNumbers(t *testing.T) {
	tests := map[string]struct {
		name   GRPCStatusCode
		number uint32
		ok     bool
	}{
		"CANCELLED is 1":            {GRPCCancelled, 1, true},
		"DEADLINE_EXCEEDED is 4":    {GRPCDeadlineExceeded, 4, true},
		"RESOURCE_EXHAUSTED is 8":   {GRPCResourceExhausted, 8, true},
		"ABORTED is 10":             {GRPCAborted, 10, true},
		"INTERNAL is 13":            {GRPCInternal, 13, true},
		"UNAVAILABLE is 14":         {GRPCUnavailable, 14, true},
		"UNAUTHENTICATED is 16":     {GRPCUnauthenticated, 16, true},
		"OK has no number here":     {"OK", 0, false},
		"a lower-case name is none": {"unavailable", 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n, ok := tc.name.Number()
			if n != tc.number || ok != tc.ok {
				t.Fatalf("Number() = %d, %v; want %d, %v", n, ok, tc.number, tc.ok)
			}
			if ok && GRPCStatusCodeOf(n) != tc.name {
				t.Errorf("GRPCStatusCodeOf(%d) = %q, want %q", n, GRPCStatusCodeOf(n), tc.name)
			}
		})
	}
	for _, n := range []uint32{0, 17, 1 << 31} {
		if got := GRPCStatusCodeOf(n); got != "" {
			t.Errorf("GRPCStatusCodeOf(%d) = %q, want none", n, got)
		}
	}
}
