package gatewayroute

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/retrydev/retry-operator/internal/rules"
)

// The Linkerd 2.16 annotations read on a route (docs/gateway-api.md#linkerd).
const (
	LinkerdRetryHTTP       = "retry.linkerd.io/http"
	LinkerdRetryGRPC       = "retry.linkerd.io/grpc"
	LinkerdRetryLimit      = "retry.linkerd.io/limit"
	LinkerdRetryTimeout    = "retry.linkerd.io/timeout"
	LinkerdTimeoutRequest  = "timeout.linkerd.io/request"
	LinkerdTimeoutResponse = "timeout.linkerd.io/response"
)

// linkerdDefaultLimit is Linkerd's retry.linkerd.io/limit when absent.
const linkerdDefaultLimit = 1

// linkerdSettings reads a route's Linkerd annotations, as Linkerd applies
// them to every rule: retry.linkerd.io/http lists the statuses retried
// ("5xx", "gateway-error", "429", "500-504"), of which the sidecar retries
// those it allows (rules.RetryableStatuses); limit is the retries (1 when
// absent); retry.linkerd.io/timeout bounds each attempt; the request and
// response timeouts bound the whole call (the shorter one wins). Without
// annotations: one attempt, the API's default deadline.
func linkerdSettings(ann map[string]string) (settings, error) {
	s := settings{attempts: 1}
	if v, ok := ann[LinkerdRetryHTTP]; ok {
		codes, err := linkerdCodes(v)
		if err != nil {
			return s, fmt.Errorf("%s: %w", LinkerdRetryHTTP, err)
		}
		s.codes = codes
		if err := s.linkerdRetries(ann); err != nil {
			return s, err
		}
	}
	return s, s.linkerdTimeouts(ann)
}

// linkerdRetries reads retry.linkerd.io/limit (the retries, 1 when absent)
// and retry.linkerd.io/timeout (each attempt's bound) into s: what a route
// whose retries are on (its http or grpc annotation) gets of them.
func (s *settings) linkerdRetries(ann map[string]string) error {
	limit := linkerdDefaultLimit
	if l, ok := ann[LinkerdRetryLimit]; ok {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || int64(n)+1 > rules.AttemptsRange.Max {
			return fmt.Errorf("%s: must be a number of retries between 0 and %d (got %q)", LinkerdRetryLimit, rules.AttemptsRange.Max-1, l)
		}
		limit = n
	}
	s.attempts = int32(limit) + 1
	if t, ok := ann[LinkerdRetryTimeout]; ok {
		d, err := positiveDuration(t)
		if err != nil {
			return fmt.Errorf("%s: %w (got %q)", LinkerdRetryTimeout, err, t)
		}
		s.backendRequest = d
	}
	return nil
}

// linkerdTimeouts reads the request and response timeouts into s: the
// shorter bounds the whole call, and an attempt's bound no shorter than it
// is dropped.
func (s *settings) linkerdTimeouts(ann map[string]string) error {
	for _, key := range []string{LinkerdTimeoutRequest, LinkerdTimeoutResponse} {
		t, ok := ann[key]
		if !ok {
			continue
		}
		d, err := positiveDuration(t)
		if err != nil {
			return fmt.Errorf("%s: %w (got %q)", key, err, t)
		}
		if s.request == nil || d < *s.request {
			s.request = &d
		}
	}
	if s.request != nil && s.backendRequest >= *s.request {
		s.backendRequest = 0 // the whole call's bound is the tighter one
	}
	return nil
}

// linkerdCodes reads retry.linkerd.io/http: comma-separated "5xx",
// "gateway-error" (502–504), a status, or a range "500-504"; what the
// sidecar retries of them, ascending. A list of which it retries nothing is
// an error: the user asked for retries.
func linkerdCodes(v string) ([]int, error) {
	var want [600]bool
	for _, item := range strings.Split(v, ",") {
		lo, hi, err := linkerdRange(strings.TrimSpace(item))
		if err != nil {
			return nil, err
		}
		for c := lo; c <= hi; c++ {
			want[c] = true
		}
	}
	var codes []int
	for _, c := range rules.RetryableStatuses() {
		if want[c] {
			codes = append(codes, c)
		}
	}
	if len(codes) == 0 {
		return nil, fmt.Errorf("%q lists no status the sidecar retries (%v)", v, rules.RetryableStatuses())
	}
	return codes, nil
}

func linkerdRange(item string) (lo, hi int, err error) {
	switch strings.ToLower(item) {
	case "5xx":
		return 500, 599, nil
	case "gateway-error":
		return 502, 504, nil
	}
	a, b, isRange := strings.Cut(item, "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 100 || hi > 599 || lo > hi {
		return 0, 0, fmt.Errorf("%q: must be 5xx, gateway-error, a status or a range such as 500-504", item)
	}
	return lo, hi, nil
}
