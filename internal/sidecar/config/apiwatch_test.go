package config

import (
	"errors"
	"testing"
	"time"

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

func TestNextBackoff(t *testing.T) {
	w := &APIWatch{MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second, UnreachableMaxBackoff: 2 * time.Second}
	refused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "retry-policies", errors.New("no RBAC"))
	tests := map[string]struct {
		prev time.Duration
		err  error
		want time.Duration
	}{
		"the first failure waits the minimum":                                 {0, refused, 500 * time.Millisecond},
		"an unreachable API server is tried again twice as late":              {500 * time.Millisecond, refused, time.Second},
		"an unreachable API server is tried at least every 2 s":               {2 * time.Second, refused, 2 * time.Second},
		"a server that stops answering after refusing is tried within 2 s":    {30 * time.Second, refused, 2 * time.Second},
		"an API server that refuses the token is asked twice as late":         {4 * time.Second, forbidden, 8 * time.Second},
		"an API server that refuses the token is asked at most every 30 s":    {30 * time.Second, forbidden, 30 * time.Second},
		"an API server that fails (503) is an answer: up to 30 s":             {16 * time.Second, apierrors.NewServiceUnavailable("etcd"), 30 * time.Second},
		"an API server that throttles (429) is an answer: up to 30 s":         {16 * time.Second, apierrors.NewTooManyRequests("slow down", 1), 30 * time.Second},
		"a refusal right after an outage starts from the unreachable backoff": {2 * time.Second, forbidden, 4 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := w.nextBackoff(tc.prev, tc.err); got != tc.want {
				t.Fatalf("nextBackoff(%s, %v) = %s, want %s", tc.prev, tc.err, got, tc.want)
			}
		})
	}
}
