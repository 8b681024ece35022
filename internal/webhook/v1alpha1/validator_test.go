package v1alpha1

import (
	"context"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

func defaulted(mod func(u *v1alpha1.Upstream)) *v1alpha1.RetryPolicy {
	p := &v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "api", Hosts: []string{"api.svc"}}}}}
	if mod != nil {
		mod(&p.Spec.Upstreams[0])
	}
	v1alpha1.SetDefaults(p) // the API server defaults before admission
	return p
}

func TestWarnings(t *testing.T) {
	tests := map[string]struct {
		mod  func(u *v1alpha1.Upstream)
		want []string
	}{
		"the defaults raise no warning": {},
		"maxAttempts above 5": {
			mod:  func(u *v1alpha1.Upstream) { u.MaxAttempts = ptr.To[int32](6) },
			want: []string{"spec.upstreams[0].maxAttempts: 6 transmissions per request multiply load 6-fold when the upstream fails; 5 or fewer is usual"},
		},
		"maxAttempts of 5 is fine": {mod: func(u *v1alpha1.Upstream) { u.MaxAttempts = ptr.To[int32](5) }},
		"DELETE replayable without an idempotency key": {
			mod:  func(u *v1alpha1.Upstream) { u.ReplayableMethods = []string{"GET", "DELETE"} },
			want: []string{"spec.upstreams[0].replayableMethods[1]: DELETE is replayed without an idempotency key; a retry after a lost response may apply the write twice unless the upstream's DELETE is idempotent (set idempotencyKey.header to be sure)"},
		},
		"PUT replayable with an idempotency key is fine": {
			mod: func(u *v1alpha1.Upstream) {
				u.ReplayableMethods = []string{"PUT"}
				u.IdempotencyKey = &v1alpha1.IdempotencyKey{Header: "Idempotency-Key"}
			},
		},
		"a deadline that could wait out a 60s hint cut short by maxWait": {
			mod:  func(u *v1alpha1.Upstream) { u.Deadline = ptr.To[v1alpha1.Duration]("2m") },
			want: []string{"spec.upstreams[0].retryAfter.maxWait: 30s is shorter than a typical 429 Retry-After of 1m0s although deadline (2m0s) could wait longer; such responses are returned to the caller as deferred"},
		},
		"a host on port 443 without tls": {
			mod:  func(u *v1alpha1.Upstream) { u.Hosts = append(u.Hosts, "api.partner.example:443") },
			want: []string{"spec.upstreams[0].hosts[1]: api.partner.example:443 is an HTTPS port; an app calling https:// through the sidecar gets a CONNECT tunnel that cannot be retried: set tls and have the app call http:// (docs/tls.md)"},
		},
		"a host on port 443 with tls is fine": {
			mod: func(u *v1alpha1.Upstream) {
				u.Hosts = append(u.Hosts, "api.partner.example:443")
				u.TLS = &v1alpha1.UpstreamTLS{}
			},
		},
		"gRPC statuses retried without a gRPC method to retry": {
			mod: func(u *v1alpha1.Upstream) {
				u.RetryOn = &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{503}, GRPCStatusCodes: []v1alpha1.GRPCStatusCode{v1alpha1.GRPCUnavailable}}
			},
			want: []string{"spec.upstreams[0].retryOn.grpcStatusCodes: replayableMethods has no gRPC method pattern, so no gRPC call is retried on these statuses; list the methods that are safe to send twice, /package.Service/Method or /package.Service/* (docs/grpc.md)"},
		},
		"gRPC statuses retried for a listed service are fine": {
			mod: func(u *v1alpha1.Upstream) {
				u.RetryOn = &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{503}, GRPCStatusCodes: []v1alpha1.GRPCStatusCode{v1alpha1.GRPCUnavailable}}
				u.ReplayableMethods = []string{"GET", "/shop.v1.Catalogue/*"}
			},
		},
		"a long deadline is fine when 429 is not retried": {
			mod: func(u *v1alpha1.Upstream) {
				u.Deadline = ptr.To[v1alpha1.Duration]("2m")
				u.RetryOn = &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{503}}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Validator{}.ValidateCreate(context.Background(), defaulted(tc.mod))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal([]string(got), tc.want) {
				t.Fatalf("warnings = %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidateRejectsWithFieldPaths(t *testing.T) {
	p := defaulted(func(u *v1alpha1.Upstream) { u.Hosts = []string{"a.svc", "a.svc"} })
	_, err := Validator{}.ValidateCreate(context.Background(), p)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v, want Invalid", err)
	}
	if want := `spec.upstreams[0].hosts[1]: Duplicate value: "a.svc is already claimed by spec.upstreams[0].hosts[0]; a host may belong to one upstream of a policy"`; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to contain %s", err, want)
	}
}

func TestUpdateWithUnchangedSpecIsAllowedEvenIfInvalid(t *testing.T) {
	old := defaulted(func(u *v1alpha1.Upstream) { u.Hosts = []string{"BAD"} })
	updated := old.DeepCopy()
	updated.Labels = map[string]string{"team": "payments"}
	if _, err := (Validator{}).ValidateUpdate(context.Background(), old, updated); err != nil {
		t.Fatalf("metadata-only update rejected: %v", err)
	}
	updated.Spec.Upstreams[0].Name = "renamed"
	if _, err := (Validator{}).ValidateUpdate(context.Background(), old, updated); !apierrors.IsInvalid(err) {
		t.Fatalf("spec update of an invalid policy: err = %v, want Invalid", err)
	}
}
