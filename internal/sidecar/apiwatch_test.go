package sidecar

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestFallbackReason(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	tests := map[string]struct {
		err  error
		want apiWatchState
	}{
		"a refused token is forbidden": {
			err: apierrors.NewUnauthorized("token expired"), want: apiFallbackForbidden,
		},
		"a missing RoleBinding is forbidden": {
			err: apierrors.NewForbidden(cm, "retry-policies", errors.New("no RBAC")), want: apiFallbackForbidden,
		},
		"a request the API server rejects is an error": {
			err: apierrors.NewBadRequest("bad field selector"), want: apiFallbackError,
		},
		"an invalid request is an error": {
			err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "retry-policies", field.ErrorList{}), want: apiFallbackError,
		},
		"a resource the API server does not know is an error": {
			err: apierrors.NewNotFound(cm, "retry-policies"), want: apiFallbackError,
		},
		"an API server that fails is unreachable": {
			err: apierrors.NewServiceUnavailable("etcd down"), want: apiFallbackUnreachable,
		},
		"a refused connection is unreachable": {
			err: errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), want: apiFallbackUnreachable,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fallbackReason(tc.err); got != tc.want {
				t.Fatalf("fallbackReason = %q, want %q", got, tc.want)
			}
		})
	}
}
