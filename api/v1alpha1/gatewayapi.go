package v1alpha1

// Names users see in the status of Gateway API routes whose parent is a
// Service (docs/gateway-api.md#in-the-cluster-the-manager-and-route-status):
// `kubectl get httproute -o yaml` shows them under status.parents[].
const (
	// GatewayControllerName is status.parents[].controllerName of the entries
	// the manager writes on an HTTPRoute; entries of other controllers are
	// never touched.
	GatewayControllerName = "retry.dev/retry-operator"
)

// Reasons of the Accepted and ResolvedRefs conditions of an HTTPRoute's
// status.parents[] entry for a Service parent.
const (
	// ReasonRouteAccepted: Accepted=True, the route is valid and rendered
	// for the callers it applies to (Gateway API's reason).
	ReasonRouteAccepted ConditionReason = "Accepted"
	// ReasonRouteInvalid: Accepted=False, a field the sidecar cannot apply;
	// the message names it (spec.rules[0].retry.codes[0]: ...). Nothing of
	// the route is rendered.
	ReasonRouteInvalid ConditionReason = "Invalid"
	// ReasonOverriddenByRetryPolicy: Accepted=True, but a RetryPolicy
	// upstream of a caller namespace names one of the route's hosts; in
	// that namespace the RetryPolicy wins for that host. The message names
	// the policy and the host.
	ReasonOverriddenByRetryPolicy ConditionReason = "OverriddenByRetryPolicy"
	// ReasonShadowedByOlderRoute: Accepted=True, but a match of the route
	// has the same precedence as a match of an older route for the same
	// Service (and port): the older route gets those requests (Gateway
	// API's rule). The message names both.
	ReasonShadowedByOlderRoute ConditionReason = "ShadowedByOlderRoute"
	// ReasonRefsResolved: ResolvedRefs=True, the parent Service exists
	// (Gateway API's reason ResolvedRefs).
	ReasonRefsResolved ConditionReason = "ResolvedRefs"
	// ReasonServiceNotFound: ResolvedRefs=False, the parentRef names a
	// Service that does not exist. The route is rendered all the same (it
	// applies as soon as the Service is created).
	ReasonServiceNotFound ConditionReason = "ServiceNotFound"
)
