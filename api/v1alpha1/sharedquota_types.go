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

// A SharedQuota is one account's allowance at a partner, drawn on by every
// attempt of every upstream that names it in quotaRef, in every pod of every
// namespace it admits (docs/quota.md). As for RetryPolicy, the schema and CEL
// below are repeated in ValidateSharedQuota and the defaults in
// SetSharedQuotaDefaults, so a SharedQuota given to the sidecar as a file is
// judged the same way.

// StoreLossPolicy says what a sidecar admits while it cannot reach the store.
//
//	LastShare: this pod's last-known share of the fleet's demand (the default)
//	EvenShare: the quota divided by the number of pods drawing on it
//	Deny:      nothing; requests are answered locally as deferred
//
// +kubebuilder:validation:Enum=LastShare;EvenShare;Deny
type StoreLossPolicy string

// The store-loss policies.
const (
	StoreLossLastShare StoreLossPolicy = "LastShare"
	StoreLossEvenShare StoreLossPolicy = "EvenShare"
	StoreLossDeny      StoreLossPolicy = "Deny"
)

// StoreLossPolicies lists the allowed values of onStoreLoss, in the order of
// the schema's enum.
func StoreLossPolicies() []StoreLossPolicy {
	return []StoreLossPolicy{StoreLossLastShare, StoreLossEvenShare, StoreLossDeny}
}

// SharedQuotaSpec is the fleet-wide allowance and where its state is kept.
// +kubebuilder:validation:XValidation:rule="has(self.requestsPerMinute) != has(self.requestsPerSecond)",message="exactly one of requestsPerMinute or requestsPerSecond is required",reason="FieldValueRequired"
type SharedQuotaSpec struct {
	// requestsPerMinute is the fleet's operating target: attempt starts per
	// minute of every consumer together. Exactly one of requestsPerMinute and
	// requestsPerSecond.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=6000000
	RequestsPerMinute *int32 `json:"requestsPerMinute,omitempty"`

	// requestsPerSecond is requestsPerMinute for high rates.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	RequestsPerSecond *int32 `json:"requestsPerSecond,omitempty"`

	// burst is the number of attempts the whole fleet may start at once, above
	// the rate: at most rate × t + burst start in any window of length t.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Burst *int32 `json:"burst,omitempty"`

	// concurrency bounds the attempts in flight of the whole fleet. Absent: no
	// bound beyond the rate.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Concurrency *int32 `json:"concurrency,omitempty"`

	// consumers says which namespaces may draw on the quota. Absent or without
	// a namespaceSelector: none.
	// +optional
	Consumers *QuotaConsumers `json:"consumers,omitempty"`

	// store is where the quota's state is kept, shared by every sidecar.
	// +required
	Store QuotaStore `json:"store"`

	// onStoreLoss says what a sidecar admits while it cannot reach the store:
	// LastShare, EvenShare or Deny.
	// +optional
	// +kubebuilder:default=LastShare
	OnStoreLoss *StoreLossPolicy `json:"onStoreLoss,omitempty"`
}

// QuotaConsumers selects the namespaces whose RetryPolicies may reference the
// quota.
type QuotaConsumers struct {
	// namespaceSelector selects namespaces by their labels. Absent: none; an
	// empty selector ({}) admits every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// QuotaStore is the store of a quota's state. Redis is the only kind today.
type QuotaStore struct {
	// redis is a Redis-compatible server.
	// +required
	Redis RedisStore `json:"redis"`
}

// RedisStore names a Redis server and the admin credentials the manager
// reaches it with. The manager alone does: the sidecars lease through its
// lease endpoint and hold no credential of the store (docs/quota.md#trust).
type RedisStore struct {
	// address is host:port of the server, as the manager reaches it.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	Address string `json:"address"`

	// credentialsSecretRef names a Secret in the manager's namespace with the
	// keys username (optional, default "default") and password of the Redis
	// user the manager leases with (and deletes the per-namespace users of
	// earlier releases with, when it may). Absent: the server needs no
	// password.
	// +optional
	CredentialsSecretRef *SecretRef `json:"credentialsSecretRef,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// QuotaRef names a SharedQuota an upstream draws on.
type QuotaRef struct {
	// name of the SharedQuota.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// QuotaConsumer is one upstream that draws on the quota.
type QuotaConsumer struct {
	// namespace of the RetryPolicy.
	// +required
	Namespace string `json:"namespace"`
	// policy is the RetryPolicy's name.
	// +required
	Policy string `json:"policy"`
	// upstream is the upstream's name in the policy.
	// +required
	Upstream string `json:"upstream"`
}

// SharedQuotaStatus is the observed state of a SharedQuota.
type SharedQuotaStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready (reasons Valid, Invalid) and StoreReachable (reasons
	// Reachable, Unreachable, AuthFailed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// consumers are the upstreams of accepted RetryPolicies that draw on the
	// quota, sorted by namespace, policy and upstream.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Consumers []QuotaConsumer `json:"consumers,omitempty"`

	// consumerCount is the number of consuming upstreams, even when consumers
	// is cut at its maximum length.
	// +optional
	ConsumerCount int32 `json:"consumerCount"`

	// drawingPods is the number of ready injected pods selected by a consuming
	// policy; 0 is written, not omitted.
	// +optional
	DrawingPods int32 `json:"drawingPods"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sq
// +kubebuilder:printcolumn:name="Per-Minute",type=integer,JSONPath=`.spec.requestsPerMinute`
// +kubebuilder:printcolumn:name="Per-Second",type=integer,JSONPath=`.spec.requestsPerSecond`
// +kubebuilder:printcolumn:name="Burst",type=integer,JSONPath=`.spec.burst`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.status.conditions[?(@.type=="StoreReachable")].status`
// +kubebuilder:printcolumn:name="Consumers",type=integer,JSONPath=`.status.consumerCount`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.drawingPods`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="StoreReachable")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// SharedQuota is one account's allowance shared by every pod and namespace that
// calls the account: a fleet-wide rate, burst and concurrency, kept in Redis.
type SharedQuota struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec defines the allowance and its store.
	// +required
	Spec SharedQuotaSpec `json:"spec"`

	// status is the observed state of the SharedQuota.
	// +optional
	Status SharedQuotaStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// SharedQuotaList contains a list of SharedQuota
type SharedQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []SharedQuota `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &SharedQuota{}, &SharedQuotaList{})
		return nil
	})
}
