/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The schema below is the first of three validation layers (schema + CEL, the
// validating webhook, the reconciler). Every rule here is repeated in Validate so
// that a policy given to the sidecar as a file, or one that slipped past a disabled
// webhook, is judged the same way. Defaults are the markers only: make
// manifests copies them from the CRD into zz_generated.defaults.go, which
// SetDefaults applies where no API server is involved.

// Jitter selects how the local backoff is randomised.
//
//	c = min(max, base·2^i)
//	Full:  uniform [0, c]
//	Equal: c/2 + uniform [0, c/2]
//	None:  c
//
// +kubebuilder:validation:Enum=Full;Equal;None
type Jitter string

// The jitter modes: internal/rules' Jitters (TestCRDMarkersEqualRules).
const (
	JitterFull  Jitter = "Full"
	JitterEqual Jitter = "Equal"
	JitterNone  Jitter = "None"
)

// RetryPolicySpec selects pods and says how their outbound HTTP calls to each
// upstream are retried.
type RetryPolicySpec struct {
	// podSelector selects the injected pods of this namespace the policy applies to.
	// An empty or absent selector selects every injected pod in the namespace.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// upstreams lists the upstream services and how calls to each are retried.
	// Names are unique within the policy.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Upstreams []Upstream `json:"upstreams"`
}

// Upstream is one service the selected pods call, matched by request authority.
// +kubebuilder:validation:XValidation:rule="!has(self.perTryTimeout) || !has(self.deadline) || duration(self.perTryTimeout) < duration(self.deadline)",messageExpression="'must be < deadline (' + self.deadline + ')'",fieldPath=".perTryTimeout",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.connectTimeout) || !has(self.deadline) || duration(self.connectTimeout) <= duration(self.deadline)",messageExpression="'must be <= deadline (' + self.deadline + ')'",fieldPath=".connectTimeout",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="!has(self.pacing) || !has(self.pacing.holdOnDeferral) || !self.pacing.holdOnDeferral || ((!has(self.maxAttempts) || self.maxAttempts > 1) && (!has(self.retryOn) || !has(self.retryOn.statusCodes) || size(self.retryOn.statusCodes) > 0))",message="needs maxAttempts > 1 and at least one retryOn.statusCodes entry: only a response that would be retried can be deferred",fieldPath=".pacing.holdOnDeferral",reason="FieldValueInvalid"
type Upstream struct {
	// name identifies the upstream in metrics, logs and the rendered config.
	// A DNS-1123 label, unique within the policy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// hosts are matched against the request authority: "host" (any port),
	// "host:port" (that port only), or "*.suffix" (any subdomain of suffix, not suffix itself).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	Hosts []string `json:"hosts"`

	// maxAttempts counts transmissions including the first: 4 means 3 retries.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// deadline bounds one logical request: all attempts and all waits.
	// +optional
	// +kubebuilder:default="10s"
	Deadline *Duration `json:"deadline,omitempty"`

	// perTryTimeout bounds one attempt up to its response headers. Must be < deadline.
	// +optional
	PerTryTimeout *Duration `json:"perTryTimeout,omitempty"`

	// connectTimeout bounds establishing a new connection: the dial and the TLS
	// handshake. Must be <= deadline. Default 5s, or the deadline if shorter (no
	// schema default, so a short deadline alone stays valid).
	// +optional
	ConnectTimeout *Duration `json:"connectTimeout,omitempty"`

	// backoff is the local wait between attempts when the server gives no hint.
	// +optional
	// +kubebuilder:default={}
	Backoff *Backoff `json:"backoff,omitempty"`

	// retryOn says which results are retried.
	// +optional
	// +kubebuilder:default={}
	RetryOn *RetryOn `json:"retryOn,omitempty"`

	// replayableMethods are the methods whose requests may be sent again: HTTP
	// method tokens (GET), and gRPC method patterns, /package.Service/Method or
	// /package.Service/* (every method of the service): a gRPC call is
	// replayable only when its method matches one.
	// POST and PATCH are never replayable by method: use idempotencyKey instead.
	// +optional
	// +listType=set
	// +kubebuilder:default={GET,HEAD,OPTIONS}
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.exists(m, m == 'POST' || m == 'PATCH')",message="POST and PATCH are not replayable by method; set idempotencyKey.header so requests that carry the key are replayed",reason="FieldValueForbidden"
	// +kubebuilder:validation:XValidation:rule="self.all(m, m.startsWith('/') || size(m) <= 32)",message="an HTTP method is at most 32 bytes",reason="FieldValueInvalid"
	// +kubebuilder:validation:XValidation:rule="self.all(m, !m.startsWith('/') || m.matches('^/([A-Za-z_][A-Za-z0-9_]*[.])*[A-Za-z_][A-Za-z0-9_]*/([A-Za-z_][A-Za-z0-9_]*|[*])$'))",message="must be a gRPC method pattern, /package.Service/Method or /package.Service/* (protobuf identifiers: letters, digits and '_')",reason="FieldValueInvalid"
	ReplayableMethods []string `json:"replayableMethods,omitzero"`

	// idempotencyKey makes a request replayable whatever its method when it carries
	// this header; the same key value is sent on every attempt.
	// +optional
	IdempotencyKey *IdempotencyKey `json:"idempotencyKey,omitempty"`

	// maxReplayBodyBytes is the largest request body buffered for replay; larger bodies
	// are streamed once and never replayed.
	// +optional
	// +kubebuilder:default=65536
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16777216
	MaxReplayBodyBytes *int64 `json:"maxReplayBodyBytes,omitempty"`

	// retryAfter says how server wait hints (Retry-After) are honoured.
	// +optional
	// +kubebuilder:default={}
	RetryAfter *RetryAfter `json:"retryAfter,omitempty"`

	// budget caps retries during an outage relative to first attempts.
	// +optional
	// +kubebuilder:default={}
	Budget *Budget `json:"budget,omitempty"`

	// rateLimit bounds attempt starts of ALL selected pods together (one account quota);
	// the controller divides it by the number of ready selected pods.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`

	// quotaRef names a SharedQuota every attempt (first or retry) draws a token
	// from, fleet-wide. The policy's namespace must be one of the quota's
	// consumers (else Accepted=False, reason QuotaNotAllowed). See docs/quota.md.
	// +optional
	QuotaRef *QuotaRef `json:"quotaRef,omitempty"`

	// concurrency bounds attempts in flight per pod, with a bounded queue.
	// +optional
	Concurrency *Concurrency `json:"concurrency,omitempty"`

	// pacing holds the upstream, in this pod, while it says it has no capacity:
	// requests wait in line for it or are answered locally with 429 and
	// X-Retry-Not-Before. Absent: off. See docs/pacing.md.
	// +optional
	Pacing *Pacing `json:"pacing,omitempty"`
	// tls, when present, makes the sidecar originate TLS to this upstream: the app
	// calls http://host/… and the sidecar speaks HTTPS (TLS 1.2 or later, HTTP/2 when
	// the upstream offers it), verifying the certificate chain and the hostname.
	// `tls: {}` verifies against the system roots with the request host as the name.
	// Verification cannot be turned off.
	// +optional
	TLS *UpstreamTLS `json:"tls,omitempty"`
}

// UpstreamTLS is TLS origination for one upstream. The field names follow Gateway
// API's BackendTLSPolicy.
// +kubebuilder:validation:XValidation:rule="!(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 && has(self.wellKnownCACertificates))",message="caCertificateRefs and wellKnownCACertificates are mutually exclusive: name the ConfigMaps of a private CA, or use System",fieldPath=".wellKnownCACertificates",reason="FieldValueForbidden"
type UpstreamTLS struct {
	// hostname is sent as SNI and is the name the certificate must be valid for.
	// Default: the request's host. A DNS name, lower-case, no wildcard.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Hostname *string `json:"hostname,omitempty"`

	// port is the TCP port dialled. Default: the request's explicit port, else 443.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// caCertificateRefs name ConfigMaps in the policy's namespace whose key ca.crt
	// holds PEM CA certificates; the upstream's chain must verify against them
	// (and only them). Mutually exclusive with wellKnownCACertificates.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	CACertificateRefs []CACertificateRef `json:"caCertificateRefs,omitempty"`

	// wellKnownCACertificates: System verifies against the system roots (the
	// sidecar image's CA bundle, or SSL_CERT_FILE / SSL_CERT_DIR). The default
	// when there are no caCertificateRefs.
	// +optional
	WellKnownCACertificates *WellKnownCACertificates `json:"wellKnownCACertificates,omitempty"`
}

// WellKnownCACertificates names a well-known set of CA certificates.
// +kubebuilder:validation:Enum=System
type WellKnownCACertificates string

// WellKnownCACertificatesSystem is the system's root CA set.
const WellKnownCACertificatesSystem WellKnownCACertificates = "System"

// CACertificateRef names a ConfigMap in the policy's namespace; its key ca.crt
// holds one or more PEM CA certificates.
type CACertificateRef struct {
	// name of the ConfigMap.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// Duration is a Go duration string such as "100ms", "1.5s" or "2m", strictly positive.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be a positive duration such as 100ms, 1.5s or 2m",reason="FieldValueInvalid"
type Duration string

// Backoff is the local, exponential wait between attempts.
// +kubebuilder:validation:XValidation:rule="!has(self.base) || !has(self.max) || duration(self.base) <= duration(self.max)",messageExpression="'must be >= backoff.base (' + self.base + ')'",fieldPath=".max",reason="FieldValueInvalid"
type Backoff struct {
	// base is the wait ceiling of the first retry; it doubles per retry up to max.
	// +optional
	// +kubebuilder:default="100ms"
	Base *Duration `json:"base,omitempty"`

	// max caps the exponential growth. Must be >= base.
	// +optional
	// +kubebuilder:default="10s"
	Max *Duration `json:"max,omitempty"`

	// jitter randomises each wait: Full, Equal or None.
	// +optional
	// +kubebuilder:default=Full
	Jitter *Jitter `json:"jitter,omitempty"`
}

// StatusCode is an HTTP status that may be retried.
// +kubebuilder:validation:Enum=408;425;429;500;502;503;504
type StatusCode int32

// RetryOn selects the retryable results.
type RetryOn struct {
	// statusCodes are retried; allowed: 408, 425, 429, 500, 502, 503, 504.
	// +optional
	// +listType=set
	// +kubebuilder:default={429,503}
	// +kubebuilder:validation:MaxItems=7
	StatusCodes []StatusCode `json:"statusCodes,omitzero"`

	// grpcStatusCodes are the gRPC statuses retried, by canonical name
	// (UNAVAILABLE, RESOURCE_EXHAUSTED, …; never OK), for gRPC methods that
	// replayableMethods lists. Absent or empty: a gRPC call is retried only
	// when its stream was refused unprocessed. See docs/grpc.md.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	GRPCStatusCodes []GRPCStatusCode `json:"grpcStatusCodes,omitempty"`

	// connectFailure retries failures where the request provably never left
	// (connection refused, DNS failure), for every method.
	// +optional
	// +kubebuilder:default=true
	ConnectFailure *bool `json:"connectFailure,omitempty"`

	// resetBeforeHeaders retries an attempt whose connection was reset or closed
	// after the request may have been written and before the response headers
	// (Envoy's reset-before-request), for replayable requests only.
	// +optional
	// +kubebuilder:default=true
	ResetBeforeHeaders *bool `json:"resetBeforeHeaders,omitempty"`
}

// IdempotencyKey names the header whose presence makes a request replayable.
type IdempotencyKey struct {
	// header is an HTTP header name (RFC 9110 token), e.g. Idempotency-Key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Header string `json:"header"`
}

// RetryAfter says how server wait hints are honoured. A hint is a strict lower
// bound: it is never shortened, only deferred to the caller.
type RetryAfter struct {
	// maxWait is the longest server-requested wait honoured automatically; a longer
	// hint returns "deferred" with X-Retry-Not-Before at once.
	// +optional
	// +kubebuilder:default="30s"
	MaxWait *Duration `json:"maxWait,omitempty"`

	// spread bounds the non-negative jitter added after a server hint, so clients
	// told the same time do not return together.
	// +optional
	// +kubebuilder:default="1s"
	Spread *Duration `json:"spread,omitempty"`
}

// Budget caps retries to a share of first attempts over a sliding 10 s window.
type Budget struct {
	// retryPercent is the share of first attempts that may be retried, 0..100.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RetryPercent *int32 `json:"retryPercent,omitempty"`

	// minRetriesPerSecond is a floor so low-traffic upstreams can still retry.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MinRetriesPerSecond *int32 `json:"minRetriesPerSecond,omitempty"`
}

// RateLimit bounds attempt starts, retries included, for the whole fleet.
type RateLimit struct {
	// requestsPerMinute is the account quota shared by all selected pods.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=6000000
	RequestsPerMinute int32 `json:"requestsPerMinute"`

	// burst is the number of attempts that may start at once per pod.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Burst *int32 `json:"burst,omitempty"`
}

// Concurrency is bounded admission: attempts in flight and a bounded wait queue.
type Concurrency struct {
	// maxInFlight bounds attempts in flight per pod.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxInFlight int32 `json:"maxInFlight"`

	// maxQueued bounds callers waiting for an in-flight slot; 0 sheds at once when full.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxQueued *int32 `json:"maxQueued,omitempty"`

	// queueTimeout bounds each wait in the queue.
	// +optional
	// +kubebuilder:default="1s"
	QueueTimeout *Duration `json:"queueTimeout,omitempty"`
}

// Pacing is quota-aware pacing: nothing is sent to the upstream before the time
// it said it will have capacity again.
type Pacing struct {
	// rateLimitHeaders reads the upstream's rate-limit response headers
	// (RateLimit and RateLimit-Policy, RateLimit-Remaining/-Reset,
	// X-RateLimit-Remaining/-Reset); remaining 0 with reset R holds it until R.
	// +optional
	// +kubebuilder:default=false
	RateLimitHeaders *bool `json:"rateLimitHeaders,omitempty"`

	// holdOnDeferral holds the upstream until X-Retry-Not-Before after a response
	// was deferred (its Retry-After exceeded retryAfter.maxWait or the deadline).
	// Off by default: a limit may be per user or per key, and one caller's
	// exhausted quota would then stop every caller of the pod.
	// +optional
	// +kubebuilder:default=false
	HoldOnDeferral *bool `json:"holdOnDeferral,omitempty"`
}

// RetryPolicyStatus is the observed state of a RetryPolicy.
type RetryPolicyStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Accepted (reasons Valid, Invalid, InvalidRef, Conflict), Programmed
	// (reason Rendered: the policy is in the namespace's retry-policies ConfigMap)
	// and Ready, their summary for tools that read one condition (kstatus, Argo CD,
	// Flux): True when the newest generation is both accepted and programmed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// upstreamCount is the number of upstreams of the observed generation
	// (kubectl get shows it; a JSONPath over spec.upstreams prints only the first).
	// +optional
	UpstreamCount int32 `json:"upstreamCount"`

	// selectedPods is the number of ready injected pods the policy selects;
	// 0 is written, not omitted.
	// +optional
	SelectedPods int32 `json:"selectedPods"`

	// programmedPods is the number of those pods whose sidecar reports (on its
	// /config endpoint) a policies.json revision at or after lastAccepted.revision:
	// the pods that run lastAccepted.generation.
	// +optional
	ProgrammedPods int32 `json:"programmedPods"`

	// lastAccepted is the last accepted generation of the spec as rendered for
	// the sidecars. It is what stays in force while a newer generation is
	// invalid, and what the manager renders again when the retry-policies
	// ConfigMap is lost or edited by hand.
	// +optional
	LastAccepted *AcceptedRendering `json:"lastAccepted,omitempty"`
}

// AcceptedRendering is one accepted generation of a RetryPolicy spec, with
// every default applied.
type AcceptedRendering struct {
	// generation of the spec this rendering was made from.
	// +required
	Generation int64 `json:"generation"`

	// revision is the first policies.json revision of the namespace that holds
	// this generation; a sidecar at this revision or later runs it.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// podSelector as accepted.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// upstreams as accepted, every default applied.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Upstreams []Upstream `json:"upstreams"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rp,categories=retry
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Upstreams",type=integer,JSONPath=`.status.upstreamCount`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.selectedPods`
// +kubebuilder:printcolumn:name="Programmed-Pods",type=integer,JSONPath=`.status.programmedPods`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RetryPolicy says how the outbound HTTP calls of selected pods to named upstreams
// are retried: attempts, deadline, backoff, replayability, Retry-After handling,
// outage budget and admission limits.
type RetryPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec defines the desired retry behaviour.
	// +required
	Spec RetryPolicySpec `json:"spec"`

	// status is the observed state of the RetryPolicy.
	// +optional
	Status RetryPolicyStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// RetryPolicyList contains a list of RetryPolicy
type RetryPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []RetryPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &RetryPolicy{}, &RetryPolicyList{})
		return nil
	})
}
