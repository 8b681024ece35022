package v1alpha1

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// QuotaPath is where the webhook server serves SharedQuota validation.
const QuotaPath = "/validate-policy-retry-dev-v1alpha1-sharedquota"

// The same three layers as for RetryPolicy (docs/quota.md): the schema and
// CEL, this webhook, and the SharedQuota controller's Ready condition all use
// v1alpha1.ValidateSharedQuota's rules.
// +kubebuilder:webhook:path=/validate-policy-retry-dev-v1alpha1-sharedquota,mutating=false,failurePolicy=fail,sideEffects=None,groups=policy.retry.dev,resources=sharedquotas,verbs=create;update,versions=v1alpha1,name=validate.sharedquota.retry.dev,admissionReviewVersions=v1,timeoutSeconds=5

// QuotaValidator validates SharedQuotas on create and update.
type QuotaValidator struct{}

var _ admission.Validator[*v1alpha1.SharedQuota] = QuotaValidator{}

// SetupQuotaWithManager registers the SharedQuota validating webhook.
func SetupQuotaWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &v1alpha1.SharedQuota{}).
		WithValidator(QuotaValidator{}).
		WithValidatorCustomPath(QuotaPath).
		Complete()
}

// ValidateCreate rejects an invalid quota with every field error.
func (QuotaValidator) ValidateCreate(_ context.Context, q *v1alpha1.SharedQuota) (admission.Warnings, error) {
	return nil, checkQuota(q)
}

// ValidateUpdate validates the new object; an update that leaves the spec as
// it is passes, as for RetryPolicy.
func (QuotaValidator) ValidateUpdate(_ context.Context, old, q *v1alpha1.SharedQuota) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, q.Spec) {
		return nil, nil
	}
	return nil, checkQuota(q)
}

// ValidateDelete allows every delete (the webhook is not registered for it).
func (QuotaValidator) ValidateDelete(context.Context, *v1alpha1.SharedQuota) (admission.Warnings, error) {
	return nil, nil
}

func checkQuota(q *v1alpha1.SharedQuota) error {
	if errs := v1alpha1.ValidateSharedQuota(q); len(errs) > 0 {
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("SharedQuota").GroupKind(), q.Name, errs)
	}
	return nil
}
