package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/retrydev/retry-operator/internal/policyset"
)

// The upstream payments-grpc of testdata/policies.yaml retries UNAVAILABLE
// of /shop.v1.Payments/GetPayment and /shop.v1.Catalogue/*; payments-api
// retries no gRPC call.
var explainGRPCCases = map[string]struct {
	host, method string
	want         HostMatch
}{
	"a replayable method of the :authority's upstream is retried on its codes": {
		host: "payments-grpc.shop.svc:50051", method: "/shop.v1.Catalogue/List",
		want: HostMatch{Host: "payments-grpc.shop.svc:50051", Policy: "payments", Upstream: "payments-grpc",
			Pattern: "payments-grpc.shop.svc:50051",
			GRPC: &GRPCMatch{Method: "/shop.v1.Catalogue/List", Replayable: true, StatusCodes: []string{"UNAVAILABLE"},
				Methods: []string{"/shop.v1.Payments/GetPayment", "/shop.v1.Catalogue/*"}},
			Detail: `RetryPolicy payments, upstream payments-grpc, by host pattern "payments-grpc.shop.svc:50051"; ` +
				"gRPC /shop.v1.Catalogue/List: replayable, the upstream retries UNAVAILABLE"},
	},
	"a method no gRPC pattern matches is never sent twice": {
		host: "payments-grpc.shop.svc:50051", method: "/shop.v1.Payments/Charge",
		want: HostMatch{Host: "payments-grpc.shop.svc:50051", Policy: "payments", Upstream: "payments-grpc",
			Pattern: "payments-grpc.shop.svc:50051",
			GRPC: &GRPCMatch{Method: "/shop.v1.Payments/Charge", StatusCodes: []string{"UNAVAILABLE"},
				Methods: []string{"/shop.v1.Payments/GetPayment", "/shop.v1.Catalogue/*"}},
			Detail: `RetryPolicy payments, upstream payments-grpc, by host pattern "payments-grpc.shop.svc:50051"; ` +
				"gRPC /shop.v1.Payments/Charge: not replayable (no gRPC pattern of replayableMethods matches it): " +
				"never sent twice, UNAVAILABLE given back as not-replayable"},
	},
	"without a method, the upstream's gRPC codes and methods are listed": {
		host: "payments-grpc.shop.svc:50051",
		want: HostMatch{Host: "payments-grpc.shop.svc:50051", Policy: "payments", Upstream: "payments-grpc",
			Pattern: "payments-grpc.shop.svc:50051",
			GRPC: &GRPCMatch{StatusCodes: []string{"UNAVAILABLE"},
				Methods: []string{"/shop.v1.Payments/GetPayment", "/shop.v1.Catalogue/*"}},
			Detail: `RetryPolicy payments, upstream payments-grpc, by host pattern "payments-grpc.shop.svc:50051"; ` +
				"gRPC calls: the upstream retries UNAVAILABLE of the methods [/shop.v1.Payments/GetPayment, /shop.v1.Catalogue/*]"},
	},
	"an upstream without gRPC codes retries no gRPC call": {
		host: "payments.shop.svc", method: "/shop.v1.Payments/GetPayment",
		want: HostMatch{Host: "payments.shop.svc", Policy: "payments", Upstream: "payments-api", Pattern: "payments.shop.svc",
			GRPC: &GRPCMatch{Method: "/shop.v1.Payments/GetPayment", StatusCodes: []string{}, Methods: []string{}},
			Detail: `RetryPolicy payments, upstream payments-api, by host pattern "payments.shop.svc"; ` +
				"gRPC /shop.v1.Payments/GetPayment: not replayable (no gRPC pattern of replayableMethods matches it), " +
				"and the upstream retries no gRPC status (retryOn.grpcStatusCodes is empty)"},
	},
	"an HTTP upstream without gRPC codes says nothing of gRPC when no method is named": {
		host: "payments.shop.svc",
		want: HostMatch{Host: "payments.shop.svc", Policy: "payments", Upstream: "payments-api", Pattern: "payments.shop.svc",
			Detail: `RetryPolicy payments, upstream payments-api, by host pattern "payments.shop.svc"`},
	},
	"an authority no policy names passes through": {
		host: "ledger.shop.svc:50051", method: "/shop.v1.Ledger/Get",
		want: HostMatch{Host: "ledger.shop.svc:50051",
			Detail: "no policy or route of this pod names the host: its requests pass through the sidecar unchanged, never retried"},
	},
}

func TestExplainGRPCCalls(t *testing.T) {
	data, err := os.ReadFile(policies)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policyset.FromPolicyYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range explainGRPCCases {
		t.Run(name, func(t *testing.T) {
			got, err := matchHost(doc.Policies, call{host: tc.host, grpcMethod: tc.method})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestExplainRouteRules: a host no RetryPolicy names is matched against the
// pod's routes; a URL's path chooses the rule (testdata/routes.yaml, for a
// pod in namespace shop).
func TestExplainRouteRules(t *testing.T) {
	data, err := os.ReadFile(routes)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policyset.FromPolicyFilesIn("shop", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, host, wantRoute, wantDetail string }{
		{"a URL's path chooses the rule", "http://payments:8080/api/refund", "HTTPRoute shop/payments-retries, rule 0",
			"HTTPRoute shop/payments-retries, rule 0, for GET /api/refund (Gateway API precedence; give a URL to choose the path)"},
		{"a host alone is a GET of /", "ledger.shop.svc.cluster.local", "HTTPRoute shop/ledger-linkerd, rule 0",
			"HTTPRoute shop/ledger-linkerd, rule 0, for GET / (Gateway API precedence; give a URL to choose the path)"},
		{"a path no rule matches passes through", "http://payments.shop:8080/health", "",
			"routes name the host, but no rule matches GET /health: such requests pass through, never retried"},
		{"a port the route does not name has no route", "http://payments.shop:9090/api", "",
			"no policy or route of this pod names the host: its requests pass through the sidecar unchanged, never retried"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := matchHost(doc.Policies, call{host: c.host})
			if err != nil {
				t.Fatal(err)
			}
			if got.Route != c.wantRoute || got.Detail != c.wantDetail {
				t.Errorf("route %q, detail %q\nwant %q, %q", got.Route, got.Detail, c.wantRoute, c.wantDetail)
			}
		})
	}
}

// Usage errors of explain's --grpc-method come before any cluster is asked.
func TestExplainGRPCMethodUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"a method without the host it is called on": {[]string{"explain", "pod/checkout", "--grpc-method", "/shop.v1.Payments/Get"},
			"kubectl retry explain: --grpc-method: name the call's :authority with --host too\n"},
		"a method that is not a gRPC path": {[]string{"explain", "pod/checkout", "--host", "payments.shop.svc", "--grpc-method", "Get"},
			"kubectl retry explain: --grpc-method \"Get\": want /package.Service/Method\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tc.args, &bytes.Buffer{}, &stderr); code != exitUsage || stderr.String() != tc.want {
				t.Errorf("exit %d, stderr %q; want exit %d, %q", code, stderr.String(), exitUsage, tc.want)
			}
		})
	}
}

// An upstream that names gRPC methods but no status retries no gRPC call,
// and explain says so rather than "replayable" alone.
func TestExplainGRPCMethodOfAnUpstreamWithoutStatuses(t *testing.T) {
	doc, err := policyset.FromPolicyYAML([]byte(`apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: health, namespace: shop}
spec:
  upstreams:
  - name: health
    hosts: ["health.shop.svc:50051"]
    replayableMethods: [/grpc.health.v1.Health/*]
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := matchHost(doc.Policies, call{host: "health.shop.svc:50051", grpcMethod: "/grpc.health.v1.Health/Check"})
	if err != nil {
		t.Fatal(err)
	}
	want := HostMatch{Host: "health.shop.svc:50051", Policy: "health", Upstream: "health", Pattern: "health.shop.svc:50051",
		GRPC: &GRPCMatch{Method: "/grpc.health.v1.Health/Check", Replayable: true, StatusCodes: []string{},
			Methods: []string{"/grpc.health.v1.Health/*"}},
		Detail: `RetryPolicy health, upstream health, by host pattern "health.shop.svc:50051"; gRPC ` +
			"/grpc.health.v1.Health/Check: replayable, but the upstream retries no gRPC status (retryOn.grpcStatusCodes is empty)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
