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

// ConditionType is the type of a condition in RetryPolicy.status.conditions;
// tools that read the status (kubectl-retry, dashboards, kstatus) compare
// against these constants, so they live with the API (docs/manager.md#status).
type ConditionType string

// ConditionReason is the reason of a condition, and of the Kubernetes event
// recorded with it.
type ConditionReason string

// Condition types of RetryPolicy.status.conditions.
const (
	// ConditionAccepted says whether the policy is in force: valid and not in
	// conflict with an older policy. Reasons: ReasonValid, ReasonInvalid,
	// ReasonInvalidRef, ReasonQuotaNotAllowed, ReasonConflict.
	ConditionAccepted ConditionType = "Accepted"
	// ConditionProgrammed says whether the policy is rendered into the namespace's
	// retry-policies ConfigMap, which the injected sidecars read. Reasons:
	// ReasonRendered, ReasonNotRendered.
	ConditionProgrammed ConditionType = "Programmed"
	// ConditionReady summarises the two for tools that read one condition
	// (kstatus, Argo CD, Flux): True (reason ReasonReconciled) when the newest
	// generation is accepted and programmed, else False with the reason of the
	// first condition that is not True (Accepted before Programmed).
	ConditionReady ConditionType = "Ready"
)

// Reasons, used both as condition reasons and as Kubernetes event reasons, so
// `kubectl get events --field-selector reason=Conflict` finds what `kubectl get rp`
// shows.
const (
	// ReasonValid: the spec passed validation and no older policy claims the same
	// host for overlapping pods. Accepted=True.
	ReasonValid ConditionReason = "Valid"
	// ReasonInvalid: the spec fails the shared validation (the object reached
	// the API server while the validating webhook was down or disabled). The
	// message lists every field error; when an earlier generation was accepted it
	// says that generation stays in force. Accepted=False.
	ReasonInvalid ConditionReason = "Invalid"
	// ReasonConflict: an older policy (by creationTimestamp, then name) claims a
	// host of this policy for pods both selectors may select. The message names
	// the winner and the host. Accepted=False.
	ReasonConflict ConditionReason = "Conflict"
	// ReasonInvalidRef: a tls.caCertificateRefs entry does not resolve: the
	// ConfigMap does not exist in the policy's namespace, has no key ca.crt, or
	// that key holds no PEM certificate. The message names the ref's field path;
	// the last accepted generation stays in force, as for ReasonInvalid.
	// Accepted=False.
	//
	// The same reason when an upstream's quotaRef names no SharedQuota: the
	// message names the field path and the quota.
	ReasonInvalidRef ConditionReason = "InvalidRef"
	// ReasonQuotaNotAllowed: an upstream's quotaRef names a SharedQuota whose
	// consumers.namespaceSelector does not select the policy's namespace. The
	// message names the field path and the quota; the last accepted generation
	// stays in force, as for ReasonInvalid. Accepted=False.
	ReasonQuotaNotAllowed ConditionReason = "QuotaNotAllowed"
	// ReasonRendered: the policy is in the ConfigMap; the message carries the
	// rendered generation and the content hash of policies.json. Programmed=True.
	ReasonRendered ConditionReason = "Rendered"
	// ReasonNotRendered: the policy is not in the ConfigMap because it is not
	// accepted and no earlier generation of it was. Programmed=False.
	ReasonNotRendered ConditionReason = "NotRendered"
	// ReasonReconciled: Accepted and Programmed are both True for the newest
	// generation. Ready=True. Never an event: the two conditions have theirs.
	ReasonReconciled ConditionReason = "Reconciled"
)

// Condition types of SharedQuota.status.conditions (docs/quota.md#status):
// ConditionReady and ConditionStoreReachable.
const (
	// ConditionStoreReachable says whether the manager reached the quota's
	// store with its admin credentials (a PING after AUTH). Reasons:
	// ReasonReachable, ReasonUnreachable, ReasonAuthFailed,
	// ReasonCredentialsNotFound.
	ConditionStoreReachable ConditionType = "StoreReachable"
)

// ConditionReady on a SharedQuota is True (reason ReasonValid) when the spec
// passes ValidateSharedQuota, else False (reason ReasonInvalid, the message
// listing every field error).

// Reasons of SharedQuota conditions.
const (
	// ReasonReachable: the manager authenticated and the store answered PING.
	// StoreReachable=True.
	ReasonReachable ConditionReason = "Reachable"
	// ReasonUnreachable: the store did not answer (connection refused, timeout,
	// DNS). The message carries the error. StoreReachable=False.
	ReasonUnreachable ConditionReason = "Unreachable"
	// ReasonAuthFailed: the store refused the admin credentials (WRONGPASS,
	// NOAUTH or NOPERM). StoreReachable=False.
	ReasonAuthFailed ConditionReason = "AuthFailed"
	// ReasonCredentialsNotFound: store.redis.credentialsSecretRef names a Secret
	// that does not exist in the manager's namespace, or has no key password.
	// StoreReachable=False.
	ReasonCredentialsNotFound ConditionReason = "CredentialsNotFound"
)

// Reasons of the events the leader records when something it keeps was broken
// and is whole again (docs/operations.md#certificates): the event is on the
// object repaired and says what was broken and for how long.
const (
	// EventReasonCertificateRepaired: the webhook certificate Secret was
	// deleted, or lost its CA or certificate, and the leader wrote it back
	// (a deleted one as it was, an emptied one with a new certificate).
	EventReasonCertificateRepaired = "CertificateRepaired"
	// EventReasonCABundleRepaired: a webhook configuration's caBundle was
	// empty, and the leader wrote the Secret's CA in.
	EventReasonCABundleRepaired = "CABundleRepaired"
)
