package gatewayroute

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// Budgets are the retry budgets of Services, from XBackendTrafficPolicies:
// every route rule for the Service gets it (and shares it: one name).
type Budgets map[NamespacedName]*v1alpha1.Budget

// Add adds the budget of p to every Service p targets; an invalid
// retryConstraint is an error naming the field, and adds nothing.
func (b Budgets) Add(p *gwxv1a1.XBackendTrafficPolicy) error {
	budget, err := BudgetOf(p)
	if err != nil || budget == nil {
		return err
	}
	for _, ref := range p.Spec.TargetRefs {
		if ref.Group == "" && ref.Kind == "Service" {
			b[NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)}] = budget
		}
	}
	return nil
}

// BudgetOf is the retry budget of p's retryConstraint, nil without one:
// budget.percent is retryPercent, minRetryRate count per interval is
// minRetriesPerSecond (rounded up), and budget.interval must be the
// sidecar's budget window, 10 s (docs/gateway-api.md#budgets).
func BudgetOf(p *gwxv1a1.XBackendTrafficPolicy) (*v1alpha1.Budget, error) {
	rc := p.Spec.RetryConstraint
	if rc == nil {
		return nil, nil
	}
	path := field.NewPath("spec", "retryConstraint")
	b := &v1alpha1.Budget{}
	if bd := rc.Budget; bd != nil {
		if bd.Percent != nil {
			if *bd.Percent < 0 || *bd.Percent > 100 {
				return nil, budgetError(p, field.Invalid(path.Child("budget", "percent"), *bd.Percent, "must be between 0 and 100"))
			}
			b.RetryPercent = ptr.To(int32(*bd.Percent))
		}
		if bd.Interval != nil {
			d, err := time.ParseDuration(string(*bd.Interval))
			if err != nil || d != limits.BudgetWindow {
				return nil, budgetError(p, field.Invalid(path.Child("budget", "interval"), string(*bd.Interval),
					fmt.Sprintf("must be %s, the sidecar's budget window", limits.BudgetWindow)))
			}
		}
	}
	if r := rc.MinRetryRate; r != nil && r.Count != nil {
		per := time.Second
		if r.Interval != nil {
			d, err := time.ParseDuration(string(*r.Interval))
			if err != nil || d <= 0 {
				return nil, budgetError(p, field.Invalid(path.Child("minRetryRate", "interval"), string(*r.Interval), "must be a positive duration"))
			}
			per = d
		}
		perSecond := math.Ceil(float64(*r.Count) / per.Seconds())
		b.MinRetriesPerSecond = ptr.To(int32(min(perSecond, math.MaxInt32)))
	}
	return b, nil
}

func budgetError(p *gwxv1a1.XBackendTrafficPolicy, err *field.Error) error {
	return fmt.Errorf("XBackendTrafficPolicy %s/%s: %w", p.Namespace, p.Name, err)
}
