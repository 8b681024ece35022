// Package v1alpha1 is the RetryPolicy validating webhook: the second of the
// three validation layers (docs/policy.md). It runs the same Validate as the reconciler
// and the sidecar, and warns about settings that are legal but risky.
package v1alpha1

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/rules"
)

// Path is where the webhook server serves RetryPolicy validation.
const Path = "/validate-policy-retry-dev-v1alpha1-retrypolicy"

// Thresholds of the warnings.
const (
	// RiskyMaxAttempts: more transmissions than this multiply an outage's load
	// more than the budget is usually sized for.
	RiskyMaxAttempts = 5
	// TypicalRetryAfter is the Retry-After a rate-limited API commonly sends with 429.
	TypicalRetryAfter = 60 * time.Second
)

// failurePolicy Fail: a policy the webhook could not check is not admitted (the
// reconciler would still catch it, but the user would learn it later).
// +kubebuilder:webhook:path=/validate-policy-retry-dev-v1alpha1-retrypolicy,mutating=false,failurePolicy=fail,sideEffects=None,groups=policy.retry.dev,resources=retrypolicies,verbs=create;update,versions=v1alpha1,name=validate.retrypolicy.retry.dev,admissionReviewVersions=v1,timeoutSeconds=5

// Validator validates RetryPolicies on create and update.
type Validator struct{}

var _ admission.Validator[*v1alpha1.RetryPolicy] = Validator{}

// SetupWithManager registers the validating webhook.
func SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.RetryPolicy{}).
		WithValidator(Validator{}).
		WithValidatorCustomPath(Path).
		Complete()
}

// ValidateCreate rejects an invalid policy with every field error, each naming
// its path and the allowed values.
func (Validator) ValidateCreate(_ context.Context, p *v1alpha1.RetryPolicy) (admission.Warnings, error) {
	return check(p)
}

// ValidateUpdate validates the new object. An update that leaves the spec as
// it is (labels, annotations, finalizers) is allowed even if the spec is
// invalid, so an object that got in while the webhook was down can still be
// relabelled or have its finalizers removed.
func (Validator) ValidateUpdate(_ context.Context, old, p *v1alpha1.RetryPolicy) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, p.Spec) {
		return nil, nil
	}
	return check(p)
}

// ValidateDelete allows every delete (the webhook is not registered for it).
func (Validator) ValidateDelete(context.Context, *v1alpha1.RetryPolicy) (admission.Warnings, error) {
	return nil, nil
}

func check(p *v1alpha1.RetryPolicy) (admission.Warnings, error) {
	if errs := v1alpha1.Validate(p); len(errs) > 0 {
		return nil, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("RetryPolicy").GroupKind(), p.Name, errs)
	}
	return Warnings(p), nil
}

// Warnings lists legal but risky settings of a valid policy, one line each,
// field path first. The object is defaulted by the API server before it gets
// here, so absent fields are judged by their defaults.
//
//	maxAttempts 6..10                               retries multiply an outage's load
//	PUT or DELETE replayable, no idempotencyKey     a retried write may be applied twice
//	429 retried, maxWait < 60s, deadline > maxWait  a typical 429 hint is deferred although the deadline could wait
//	a host on port 443, no tls                      the app's https:// calls are tunnels without retries
//	grpcStatusCodes, no gRPC method pattern         no gRPC call is ever retried on them
func Warnings(p *v1alpha1.RetryPolicy) admission.Warnings {
	var w admission.Warnings
	for i := range p.Spec.Upstreams {
		u := &p.Spec.Upstreams[i]
		path := fmt.Sprintf("spec.upstreams[%d]", i)
		if u.MaxAttempts != nil && *u.MaxAttempts > RiskyMaxAttempts {
			w = append(w, fmt.Sprintf("%s.maxAttempts: %d transmissions per request multiply load %d-fold when the upstream fails; %d or fewer is usual",
				path, *u.MaxAttempts, *u.MaxAttempts, RiskyMaxAttempts))
		}
		if u.IdempotencyKey == nil {
			for j, m := range u.ReplayableMethods {
				if m == "PUT" || m == "DELETE" {
					w = append(w, fmt.Sprintf("%s.replayableMethods[%d]: %s is replayed without an idempotency key; a retry after a lost response may apply the write twice unless the upstream's %s is idempotent (set idempotencyKey.header to be sure)",
						path, j, m, m))
				}
			}
		}
		if retries429(u) && u.RetryAfter != nil && u.RetryAfter.MaxWait != nil {
			maxWait, err1 := time.ParseDuration(string(*u.RetryAfter.MaxWait))
			deadline, err2 := time.ParseDuration(string(ptrOr(u.Deadline, v1alpha1.DefaultDeadline)))
			if err1 == nil && err2 == nil && maxWait < TypicalRetryAfter && deadline > maxWait {
				w = append(w, fmt.Sprintf("%s.retryAfter.maxWait: %s is shorter than a typical 429 Retry-After of %s although deadline (%s) could wait longer; such responses are returned to the caller as deferred",
					path, maxWait, TypicalRetryAfter, deadline))
			}
		}
		if u.RetryOn != nil && len(u.RetryOn.GRPCStatusCodes) > 0 && !slices.ContainsFunc(u.ReplayableMethods, rules.IsGRPCMethodPattern) {
			w = append(w, fmt.Sprintf("%s.retryOn.grpcStatusCodes: replayableMethods has no gRPC method pattern, so no gRPC call is retried on these statuses; list the methods that are safe to send twice, /package.Service/Method or /package.Service/* (docs/grpc.md)", path))
		}
		if u.TLS == nil {
			for j, h := range u.Hosts {
				if strings.HasSuffix(h, ":443") {
					w = append(w, fmt.Sprintf("%s.hosts[%d]: %s is an HTTPS port; an app calling https:// through the sidecar gets a CONNECT tunnel that cannot be retried: set tls and have the app call http:// (docs/tls.md)",
						path, j, h))
				}
			}
		}
	}
	return w
}

func retries429(u *v1alpha1.Upstream) bool {
	if u.RetryOn == nil || u.RetryOn.StatusCodes == nil {
		return slices.Contains(v1alpha1.DefaultStatusCodes, 429)
	}
	return slices.Contains(u.RetryOn.StatusCodes, 429)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
