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

// The well-known names of retry-operator: the labels and annotations users set
// (docs/manager.md, docs/clients.md), the ports of the injected sidecar
// (docs/sidecar.md) and the ConfigMap the manager renders for it. Every other
// package refers to these; none spells them again.

// Labels and annotations.
const (
	// LabelNamespaceInjection on a namespace, value NamespaceInjectionEnabled,
	// injects every pod of the namespace that does not opt out.
	LabelNamespaceInjection   = "retry.dev/injection"
	NamespaceInjectionEnabled = "enabled"
	// LabelPodInject on a pod: "true" opts in (whatever the namespace says),
	// "false" opts out.
	LabelPodInject = "retry.dev/inject"
	// LabelSidecar is set by the injector on every pod it injects, value
	// LabelSidecarInjected. The controller watches (and caches) only pods with it.
	LabelSidecar         = "retry.dev/sidecar"
	LabelSidecarInjected = "injected"

	// Resource overrides of the sidecar container, any Kubernetes quantity.
	AnnotationSidecarCPURequest    = "retry.dev/sidecar-cpu-request"
	AnnotationSidecarCPULimit      = "retry.dev/sidecar-cpu-limit"
	AnnotationSidecarMemoryRequest = "retry.dev/sidecar-memory-request"
	AnnotationSidecarMemoryLimit   = "retry.dev/sidecar-memory-limit"

	// LabelInterception, as a label or an annotation on the namespace or the
	// pod, with the value InterceptionTransparent, asks for transparent
	// interception instead of the proxy environment.
	LabelInterception       = "retry.dev/interception"
	InterceptionTransparent = "transparent"
	// AnnotationInterceptPorts on the pod (or else the namespace) lists the
	// destination ports intercepted, as "80,8080". 443 is never intercepted.
	AnnotationInterceptPorts = "retry.dev/intercept-ports"

	// AnnotationSidecarAPIAccess on a namespace, value SidecarAPIAccessDisabled,
	// keeps the sidecars' RoleBinding out of it: its sidecars follow the mounted
	// ConfigMap file only (updated on the kubelet's sync period, about a minute).
	AnnotationSidecarAPIAccess = "retry.dev/sidecar-api-access"
	SidecarAPIAccessDisabled   = "disabled"
)

// Where and under which names the operator installs itself (config/default,
// dist/, the chart); a test holds the generated manifests to these.
const (
	// OperatorNamespace is the manager's namespace in the release artefacts,
	// and the default of the manager's --operator-namespace.
	OperatorNamespace = "retry-operator-system"
	// SystemNamespace is never injected (nor is OperatorNamespace): a down
	// operator must not stand in the way of the cluster's own pods.
	SystemNamespace = "kube-system"
	// The webhook configurations, and the webhooks in them (as named by the
	// +kubebuilder:webhook markers).
	MutatingWebhookConfigurationName   = "retry-operator-mutating-webhook-configuration"
	ValidatingWebhookConfigurationName = "retry-operator-validating-webhook-configuration"
	InjectWebhookName                  = "inject.retry.dev"
	PodOptInInjectWebhookName          = "pod-inject.retry.dev"
	ValidateWebhookName                = "validate.retrypolicy.retry.dev"
	ValidateQuotaWebhookName           = "validate.sharedquota.retry.dev"
	GuardWebhookName                   = "guard.retry.dev"
)

// ExcludedNamespaces are the namespaces whose pods are never injected, with
// the operator in operatorNamespace.
func ExcludedNamespaces(operatorNamespace string) []string {
	return []string{SystemNamespace, operatorNamespace}
}

// The sidecar's ports.
const (
	// ProxyPort is the forward proxy, bound to loopback: only the pod's own
	// containers can use it.
	ProxyPort = 15001
	// TransparentPort is the sidecar's --transparent-listen port (on loopback)
	// in transparent interception: the redirect rules send intercepted
	// connections there.
	TransparentPort = 15006
	// AdminPort serves /healthz, /readyz and /metrics, on loopback.
	AdminPort = 15020
	// StatsPort serves /metrics and /config on the pod IP (--stats-listen): the
	// manager reads each sidecar's configuration revision there. Read-only.
	StatsPort = 15090
)

// The per-namespace ConfigMap the manager renders and the sidecar reads.
const (
	// PoliciesConfigMapName is the ConfigMap's name.
	PoliciesConfigMapName = "retry-policies"
	// PoliciesConfigMapKey holds the policy document as JSON.
	PoliciesConfigMapKey = "policies.json"
)

// SharedQuota: the keys of a quota in its store, and what earlier releases
// created there.
const (
	// QuotaKeyPrefix + quota name + QuotaKeySuffix starts every store key of a
	// quota (QuotaKeys). The braces are a Redis Cluster hash tag: all keys of
	// one quota live in one slot, so one script can touch them all.
	QuotaKeyPrefix = "retry:quota:{"
	QuotaKeySuffix = "}:"
	// LegacyQuotaUserPrefix + namespace is the Redis ACL user earlier releases
	// created for a consuming namespace (its password in the Secret
	// LegacyQuotaCredentialsSecretName of the namespace). The manager deletes
	// such users from every store it manages (docs/operations.md#upgrade).
	LegacyQuotaUserPrefix            = "retry-operator:ns:"
	LegacyQuotaCredentialsSecretName = "retry-quota-credentials"
)

// QuotaKeys is the prefix of every store key of the SharedQuota name, for
// example "retry:quota:{partner-payments}:".
func QuotaKeys(name string) string {
	return QuotaKeyPrefix + name + QuotaKeySuffix
}

// SharedQuota: how a sidecar draws on a quota through the manager's lease
// endpoint (docs/quota.md#trust). The sidecar holds no store credential: it
// presents a projected service-account token of its pod, bound to
// QuotaTokenAudience, which the endpoint verifies with a TokenReview.
const (
	// QuotaTokenAudience is the audience of that token; the endpoint accepts
	// no other, and the API server accepts it for nothing else.
	QuotaTokenAudience = "quota.retry.dev"
	// QuotaTokenDir is where the injector mounts the token, into the
	// retry-sidecar container only, as the file QuotaTokenFile
	// (QuotaTokenPath), which the kubelet replaces before the token expires.
	QuotaTokenDir  = "/var/run/secrets/retry.dev/quota"
	QuotaTokenFile = "token"
	QuotaTokenPath = QuotaTokenDir + "/" + QuotaTokenFile
	// QuotaTokenSeconds is the token's lifetime as the injector asks for it.
	QuotaTokenSeconds = 3600
	// QuotaLeasePort is the port of the lease endpoint on every manager
	// replica (--quota-lease-bind-address) and on the webhook Service.
	QuotaLeasePort = 9445
)

// QuotaLeasePath is the path of the lease endpoint of the SharedQuota name:
// a POST of one lease request, answered with one lease reply (JSON).
func QuotaLeasePath(name string) string {
	return "/v1/quotas/" + name + "/lease"
}
