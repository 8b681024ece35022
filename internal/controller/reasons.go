package controller

// Condition types of RetryPolicy.status.conditions.
const (
	// ConditionAccepted says whether the policy is in force: valid and not in
	// conflict with an older policy. Reasons: ReasonValid, ReasonInvalid,
	// ReasonConflict.
	ConditionAccepted = "Accepted"
	// ConditionProgrammed says whether the policy is rendered into the namespace's
	// retry-policies ConfigMap, which the injected sidecars read. Reasons:
	// ReasonRendered, ReasonNotRendered.
	ConditionProgrammed = "Programmed"
	// ConditionReady summarises the two for tools that read one condition
	// (kstatus, Argo CD, Flux): True (reason ReasonReconciled) when the newest
	// generation is accepted and programmed, else False with the reason of the
	// first condition that is not True (Accepted before Programmed).
	ConditionReady = "Ready"
)

// Reasons, used both as condition reasons and as Kubernetes event reasons, so
// `kubectl get events --field-selector reason=Conflict` finds what `kubectl get rp`
// shows.
const (
	// ReasonValid: the spec passed validation and no older policy claims the same
	// host for overlapping pods. Accepted=True.
	ReasonValid = "Valid"
	// ReasonInvalid: the spec fails the shared validation (the object reached
	// the API server while the validating webhook was down or disabled). The
	// message lists every field error; when an earlier generation was accepted it
	// says that generation stays in force. Accepted=False.
	ReasonInvalid = "Invalid"
	// ReasonConflict: an older policy (by creationTimestamp, then name) claims a
	// host of this policy for pods both selectors may select. The message names
	// the winner and the host. Accepted=False.
	ReasonConflict = "Conflict"
	// ReasonInvalidRef: a tls.caCertificateRefs entry does not resolve: the
	// ConfigMap does not exist in the policy's namespace, has no key ca.crt, or
	// that key holds no PEM certificate. The message names the ref's field path;
	// the last accepted generation stays in force, as for ReasonInvalid.
	// Accepted=False.
	ReasonInvalidRef = "InvalidRef"
	// ReasonRendered: the policy is in the ConfigMap; the message carries the
	// rendered generation and the content hash of policies.json. Programmed=True.
	ReasonRendered = "Rendered"
	// ReasonNotRendered: the policy is not in the ConfigMap because it is not
	// accepted and no earlier generation of it was. Programmed=False.
	ReasonNotRendered = "NotRendered"
	// ReasonReconciled: Accepted and Programmed are both True for the newest
	// generation. Ready=True. Never an event: the two conditions have theirs.
	ReasonReconciled = "Reconciled"
)
