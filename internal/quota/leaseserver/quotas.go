package leaseserver

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// ErrForbidden marks a namespace that may not draw on a quota: the quota does
// not exist or is invalid, the namespace is gone (or going), or the quota's
// consumers.namespaceSelector does not select it. The endpoint answers 403,
// which the sidecar takes as revoked.
var ErrForbidden = errors.New("the namespace may not draw on the quota")

// Quotas decides which quota a namespace may draw on.
type Quotas interface {
	// Quota returns the SharedQuota name, defaulted, when namespace ns may
	// draw on it. When it may not, the error wraps ErrForbidden, and the
	// quota is returned too if it exists and is valid (its store then
	// forgets the namespace). Any other error means it cannot tell now.
	Quota(ctx context.Context, name, ns string) (*v1alpha1.SharedQuota, error)
}

// ClusterQuotas answers from the API objects: the SharedQuota and the
// Namespace, read through the manager's cache.
type ClusterQuotas struct {
	Reader client.Reader
}

// Quota implements Quotas.
func (c ClusterQuotas) Quota(ctx context.Context, name, ns string) (*v1alpha1.SharedQuota, error) {
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, fmt.Errorf("%w: %q is not a SharedQuota name", ErrForbidden, cut(name))
	}
	var q v1alpha1.SharedQuota
	if err := c.Reader.Get(ctx, types.NamespacedName{Name: name}, &q); apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: SharedQuota %s does not exist", ErrForbidden, name)
	} else if err != nil {
		return nil, fmt.Errorf("reading SharedQuota %s: %w", name, err)
	}
	var n corev1.Namespace
	err := c.Reader.Get(ctx, types.NamespacedName{Name: ns}, &n)
	switch {
	case apierrors.IsNotFound(err):
		return judge(&q, ns, nil, "does not exist")
	case err != nil:
		return nil, fmt.Errorf("reading Namespace %s: %w", ns, err)
	case n.DeletionTimestamp != nil:
		return judge(&q, ns, nil, "is being deleted")
	}
	return judge(&q, ns, n.Labels, "")
}

// StaticQuotas answers from fixed tables: the tests and the quota benchmark,
// which run without an API server. A namespace absent from Namespaces does
// not exist.
type StaticQuotas struct {
	Quotas     map[string]*v1alpha1.SharedQuota
	Namespaces map[string]map[string]string // labels by namespace
}

// Quota implements Quotas.
func (s StaticQuotas) Quota(_ context.Context, name, ns string) (*v1alpha1.SharedQuota, error) {
	q, ok := s.Quotas[name]
	if !ok {
		return nil, fmt.Errorf("%w: SharedQuota %s does not exist", ErrForbidden, cut(name))
	}
	labels, ok := s.Namespaces[ns]
	if !ok {
		return judge(q, ns, nil, "does not exist")
	}
	return judge(q, ns, labels, "")
}

// judge decides on an existing quota for namespace ns with labels; gone, when
// not empty, says why the namespace cannot draw whatever its labels.
func judge(q *v1alpha1.SharedQuota, ns string, labels map[string]string, gone string) (*v1alpha1.SharedQuota, error) {
	d := q.DeepCopy()
	v1alpha1.SetSharedQuotaDefaults(d)
	if errs := v1alpha1.ValidateSharedQuota(d); len(errs) > 0 {
		return nil, fmt.Errorf("%w: SharedQuota %s is not valid", ErrForbidden, q.Name)
	}
	if gone != "" {
		return d, fmt.Errorf("%w: namespace %s %s", ErrForbidden, ns, gone)
	}
	admitted, err := policyset.Admits(d, labels)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	if !admitted {
		return d, fmt.Errorf("%w: SharedQuota %s does not admit namespace %s", ErrForbidden, q.Name, ns)
	}
	return d, nil
}

// cut bounds a string taken from the network before it is logged or
// answered.
func cut(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
