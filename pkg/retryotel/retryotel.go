// Package retryotel turns what a retryhttp.Transport does into OpenTelemetry
// spans (docs/observability.md#tracing): one span per logical request and one
// CLIENT span per attempt, each wait an event on the request span.
//
//	GET            SERVER (sidecar) or INTERNAL (in-process)   retry.upstream=payments retry.outcome=success retry.attempts=3
//	├─ GET         CLIENT  http.response.status_code=503
//	│  event retry.wait  retry.delay=0.5 retry.reason=backoff
//	├─ GET         CLIENT  http.request.resend_count=1 http.response.status_code=503
//	│  event retry.wait  retry.delay=1.2 retry.reason=retry_after
//	└─ GET         CLIENT  http.request.resend_count=2 http.response.status_code=200
//
// The retry-sidecar and in-process users of retryhttp.Transport (Transport in
// this package) build their spans with the same code. It reads nothing from
// requests and responses but the method, the URL's host and port, the status
// and the allow-listed Server and Via response headers, each made valid UTF-8
// and cut to DefaultValueLimit bytes (Clean); the upstream receives each
// attempt's span context as its W3C traceparent.
//
// pkg/retrypolicy and retryhttp know nothing of OpenTelemetry: NewTransport
// hooks the span builder in as the Transport's Observer and around its Inner
// RoundTripper, and it finds the state of a request in the request's context.
package retryotel

import (
	"go.opentelemetry.io/otel/attribute"
)

// The attributes and the event this package records (docs/observability.md#tracing).
const (
	// On the request span.
	AttrPolicy    = attribute.Key("retry.policy")     // the RetryPolicy, namespace/name (sidecar)
	AttrUpstream  = attribute.Key("retry.upstream")   // the upstream's name
	AttrOutcome   = attribute.Key("retry.outcome")    // docs/retry-semantics.md#outcomes
	AttrAttempts  = attribute.Key("retry.attempts")   // transmissions made
	AttrNotBefore = attribute.Key("retry.not_before") // X-Retry-Not-Before of a deferred request

	// The event of every wait, on the request span; its timestamp is the start
	// of the wait.
	EventWait  = "retry.wait"
	AttrDelay  = attribute.Key("retry.delay")  // seconds
	AttrReason = attribute.Key("retry.reason") // one of the Reason values

	// EventLocalAnswer: the request was answered without reaching the
	// upstream (shed, held, not-replayable before any attempt), with AttrOutcome.
	EventLocalAnswer = "retry.local_answer"

	// OpenTelemetry HTTP semantic conventions, on attempt spans (and the method
	// and status on the request span).
	AttrMethod       = attribute.Key("http.request.method")
	AttrStatus       = attribute.Key("http.response.status_code")
	AttrResendCount  = attribute.Key("http.request.resend_count")
	AttrServerAddr   = attribute.Key("server.address")
	AttrServerPort   = attribute.Key("server.port")
	AttrErrorType    = attribute.Key("error.type")
	AttrHeaderServer = attribute.Key("http.response.header.server")
	AttrHeaderVia    = attribute.Key("http.response.header.via")
)

// Reason is why a request waited: the value of retry.reason.
type Reason string

// The reasons of a wait.
const (
	ReasonRetryAfter Reason = "retry_after" // before a retry, as the response's Retry-After asked
	ReasonBackoff    Reason = "backoff"     // before a retry, the policy's backoff
	ReasonPacing     Reason = "pacing"      // in line for a hold of the upstream (docs/pacing.md)
	ReasonQueue      Reason = "queue"       // in the concurrency queue (admission)
	ReasonRateLimit  Reason = "rate_limit"  // for a start token of the policy's rateLimit
	ReasonQuota      Reason = "quota"       // for the fleet's shared quota
)
