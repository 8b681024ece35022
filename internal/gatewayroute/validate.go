package gatewayroute

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/retrydev/retry-operator/internal/rules"
)

// Validate checks what the sidecar needs of a route's rules beyond the
// Gateway API CRD's own schema (which the API server applied, and a policy
// file did not): retry codes it retries, attempts within its range,
// timeouts that parse and nest, regular expressions that compile at a
// bounded cost, and the route's Linkerd annotations. Each error names the
// field (docs/gateway-api.md#bad-input).
func Validate(route *gwv1.HTTPRoute) field.ErrorList {
	var errs field.ErrorList
	rulesPath := field.NewPath("spec", "rules")
	for i := range route.Spec.Rules {
		r := &route.Spec.Rules[i]
		p := rulesPath.Index(i)
		errs = append(errs, validateRetry(r.Retry, p.Child("retry"))...)
		errs = append(errs, validateTimeouts(r.Timeouts, p.Child("timeouts"))...)
		for j, m := range matchesOf(r.Matches) {
			errs = append(errs, validateMatch(m, p.Child("matches").Index(j))...)
		}
	}
	if _, err := linkerdSettings(route.Annotations); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations"), "", err.Error()))
	}
	return errs
}

func validateRetry(r *gwv1.HTTPRouteRetry, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	for i, c := range r.Codes {
		errs = append(errs, validateCode(int(c), p.Child("codes").Index(i))...)
	}
	if r.Attempts != nil {
		// attempts counts retries; maxAttempts counts transmissions.
		if n := int64(*r.Attempts); n < 1 || n+1 > rules.AttemptsRange.Max {
			errs = append(errs, field.Invalid(p.Child("attempts"), n,
				fmt.Sprintf("must be between 1 and %d (retries: the sidecar sends at most %d times)", rules.AttemptsRange.Max-1, rules.AttemptsRange.Max)))
		}
	}
	if r.Backoff != nil {
		if _, err := positiveDuration(string(*r.Backoff)); err != nil {
			errs = append(errs, field.Invalid(p.Child("backoff"), string(*r.Backoff), err.Error()))
		}
	}
	return errs
}

// validateCode accepts a status Gateway API allows (400–599) that the
// sidecar retries; the others are refused, never silently not retried.
func validateCode(code int, p *field.Path) field.ErrorList {
	if code < 400 || code > 599 {
		return field.ErrorList{field.Invalid(p, code, "must be between 400 and 599")}
	}
	if problem := rules.StatusProblem(code); problem != "" {
		return field.ErrorList{field.NotSupported(p, code, strings.Split(strings.TrimPrefix(problem, "must be one of "), ", "))}
	}
	return nil
}

func validateTimeouts(t *gwv1.HTTPRouteTimeouts, p *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	var errs field.ErrorList
	var request, backend time.Duration
	var err error
	if t.Request != nil {
		if request, err = duration(string(*t.Request)); err != nil {
			errs = append(errs, field.Invalid(p.Child("request"), string(*t.Request), err.Error()))
		}
	}
	if t.BackendRequest != nil {
		if backend, err = duration(string(*t.BackendRequest)); err != nil {
			errs = append(errs, field.Invalid(p.Child("backendRequest"), string(*t.BackendRequest), err.Error()))
		}
	}
	if len(errs) == 0 && request > 0 && backend > request {
		errs = append(errs, field.Invalid(p.Child("backendRequest"), string(*t.BackendRequest),
			fmt.Sprintf("must be <= timeouts.request (%s)", *t.Request)))
	}
	return errs
}

func validateMatch(m RouteMatch, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.PathType == MatchRegularExpression {
		if _, err := CompileRegex(m.Path); err != nil {
			errs = append(errs, field.Invalid(p.Child("path", "value"), m.Path, err.Error()))
		}
	}
	for _, v := range []struct {
		name string
		vs   []ValueMatch
	}{{"headers", m.Headers}, {"queryParams", m.QueryParams}} {
		for i, vm := range v.vs {
			if vm.Type != MatchRegularExpression {
				continue
			}
			if _, err := CompileRegex(vm.Value); err != nil {
				errs = append(errs, field.Invalid(p.Child(v.name).Index(i).Child("value"), vm.Value, err.Error()))
			}
		}
	}
	return errs
}

// duration parses a Gateway API duration (a subset of Go's: "1h", "10s",
// "500ms"); 0 is allowed.
func duration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("must be a duration such as 10s or 500ms")
	}
	return d, nil
}

func positiveDuration(s string) (time.Duration, error) {
	d, err := duration(s)
	if err == nil && d == 0 {
		err = fmt.Errorf("must be a positive duration such as 100ms")
	}
	return d, err
}
