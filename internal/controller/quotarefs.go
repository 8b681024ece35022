package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// checkQuotaRefs judges the quotaRefs of a valid policy against the quotas and
// the namespace's labels: a quota that does not exist is InvalidRef, one that
// does not admit the namespace (or whose own spec is invalid) QuotaNotAllowed.
// When both occur, InvalidRef is the reason and every error is listed.
func checkQuotaRefs(p *v1alpha1.RetryPolicy, in Input) (field.ErrorList, v1alpha1.ConditionReason) {
	var errs field.ErrorList
	reason := v1alpha1.ReasonQuotaNotAllowed
	for i, u := range p.Spec.Upstreams {
		if u.QuotaRef == nil {
			continue
		}
		fp := field.NewPath("spec", "upstreams").Index(i).Child("quotaRef", "name")
		name := u.QuotaRef.Name
		q, ok := in.Quotas[name]
		if !ok {
			e := field.NotFound(fp, name)
			e.Detail = fmt.Sprintf("SharedQuota %s does not exist", name)
			errs = append(errs, e)
			reason = v1alpha1.ReasonInvalidRef
			continue
		}
		if problem := quotaProblem(q, in.NamespaceLabels, p.Namespace); problem != "" {
			errs = append(errs, field.Forbidden(fp, problem))
		}
	}
	return errs, reason
}

// quotaProblem says why the quota q cannot serve namespace ns ("" when it
// can): its spec is invalid, or its consumers do not select ns.
func quotaProblem(q *v1alpha1.SharedQuota, nsLabels map[string]string, ns string) string {
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	if errs := v1alpha1.ValidateSharedQuota(d); len(errs) > 0 {
		return fmt.Sprintf("SharedQuota %s is not Ready: %s", q.Name, errs.ToAggregate())
	}
	admitted, err := policyset.Admits(d, nsLabels)
	if err != nil {
		return err.Error()
	}
	if !admitted {
		return fmt.Sprintf("SharedQuota %s does not admit namespace %s: its spec.consumers.namespaceSelector does not select the namespace's labels", q.Name, ns)
	}
	return ""
}

// usableQuota is the rendering of the quota name for namespace in, when it
// exists, is valid and admits the namespace.
func usableQuota(name string, in Input) (policyset.Quota, bool) {
	q, ok := in.Quotas[name]
	if !ok || quotaProblem(q, in.NamespaceLabels, "") != "" {
		return policyset.Quota{}, false
	}
	return policyset.RenderQuota(q, &in.Lease), true
}

// renderQuotas is Document.Quotas for the rendered policies: each quota they
// name as it is now, or, for one that is no longer usable (a kept rendering
// of an invalid policy), as the previous document rendered it, leasing from
// the endpoint (which refuses the namespace: the sidecars deny at once). A
// previous rendering never carries a store to the sidecars: one of an older
// manager named the Redis its sidecars reached themselves.
func renderQuotas(in Input, policies []policyset.Policy) []policyset.Quota {
	var out []policyset.Quota
	for _, name := range policyset.QuotaRefs(policies) {
		if q, ok := usableQuota(name, in); ok {
			out = append(out, q)
		} else if q, ok := in.Previous.Quota(name); ok {
			lease := in.Lease
			q.Lease, q.Store = &lease, nil
			out = append(out, q)
		}
	}
	return out
}

// keptQuotasRenderable reports whether every quota the kept rendering c names
// can be rendered (renderQuotas): a kept rendering whose quota is neither
// usable nor in the previous document is dropped rather than rendered with a
// quotaRef the sidecars would refuse.
func keptQuotasRenderable(c candidate, in Input) bool {
	for _, u := range c.upstreams {
		if u.QuotaRef == nil {
			continue
		}
		if _, ok := usableQuota(u.QuotaRef.Name, in); ok {
			continue
		}
		if _, ok := in.Previous.Quota(u.QuotaRef.Name); !ok {
			return false
		}
	}
	return true
}
