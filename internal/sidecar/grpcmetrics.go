package sidecar

import (
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// The gRPC calls of a policy are counted in the series of its upstream
// (docs/observability.md): each call once in retry_sidecar_requests_total by
// its outcome, each attempt in retry_sidecar_attempts_total by its gRPC
// status's name (OK, UNAVAILABLE, …), or its error class when no status came.

// grpcStatusKeyBase is where the keys of gRPC statuses start in
// upstreamMetrics.statuses, above HTTP's 100–999 and statusOther: key
// grpcStatusKeyBase+n is code n, and grpcStatusKeyBase+MaxGRPCStatus+1 any
// code gRPC does not define.
const grpcStatusKeyBase = 2000

// grpcStatusLabel is the status label of key k ≥ grpcStatusKeyBase.
func grpcStatusLabel(k int) string {
	code := uint32(k - grpcStatusKeyBase)
	switch {
	case code == 0:
		return "OK"
	case code > retrypolicy.MaxGRPCStatus:
		return "other"
	}
	return string(v1alpha1.GRPCStatusCodeOf(code))
}

// grpcAttempt counts one attempt of a call to upstream.
func (m *Metrics) grpcAttempt(upstream string, a grpcAttempt) {
	if m == nil {
		return
	}
	u := m.upstream(upstream)
	key := grpcStatusKeyBase + retrypolicy.MaxGRPCStatus + 1
	switch {
	case a.Refused:
		key = -int(retrypolicy.Refused)
	case a.ConnectFailure:
		key = -int(retrypolicy.ConnectFailure)
	case a.Err != nil:
		key = -int(retrypolicy.Ambiguous)
	default:
		if code, ok := grpcCode(a.Status, a.HTTPStatus); ok && code <= retrypolicy.MaxGRPCStatus {
			key = grpcStatusKeyBase + int(code)
		}
	}
	m.status(u, upstream, key).Inc()
}

// grpcCall counts a call to upstream that ended with outcome after elapsed.
func (m *Metrics) grpcCall(upstream string, outcome retrypolicy.Outcome, elapsed time.Duration) {
	if m == nil || outcome == "" {
		return
	}
	m.Observe(retryhttp.Event{Kind: retryhttp.EventOutcome, Upstream: upstream, Outcome: outcome, Elapsed: elapsed})
}

// rateLimitMalformed counts rate-limit metadata of a gRPC answer that did
// not parse (header and reason as for HTTP's headers); it holds nothing.
func (m *Metrics) rateLimitMalformed(upstream, header, reason string) {
	if m == nil {
		return
	}
	m.rateLimitFailures.WithLabelValues(upstream, header, reason).Inc()
}
