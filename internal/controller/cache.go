package controller

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// What the manager caches (docs/manager.md, "What the manager caches"). A
// tenant with the admin role in its namespace writes ConfigMaps, pods and
// RoleBindings there, with any label and up to about 1.5 MiB each: nothing it
// writes may enter a cache in full, or it could grow every replica's memory
// until it is killed. So each kind is selected by a name the manager writes
// (one object per namespace) or by the injection label, and cut down by a
// transform to the fields the controllers read:
//
//	kind             selected by                             kept
//	ConfigMap        metadata.name=retry-policies            policies.json, managed-by label, owners
//	RoleBinding      metadata.name=retry-sidecar, label      managed-by label, owners, roleRef, subjects
//	Pod              label retry.dev/sidecar=injected        labels (≤ MaxPodLabelBytes), service account, IP, readiness
//	Namespace        all (cluster admins write them)         labels, annotations
//	RetryPolicy      all (the input)                         spec and status, no annotations
//	SharedQuota      all (cluster admins write them)         everything but managed fields
//	Service          all (a route's parent exists or not)    identity only (name, namespace, UID)
//	HTTPRoute        all, when served (GatewayAPI)           spec, status, the Linkerd annotations
//	XBackendTraffic… all, when served (GatewayAPI)           everything but managed fields
//
// The ConfigMaps named in tls.caCertificateRefs are not cached: they are read
// by name when a namespace is rendered (caConfigMaps). Secrets are never
// cached.
const (
	// MaxPodLabelBytes bounds the labels (keys and values) of one cached pod. A
	// pod with more keeps only retry.dev/sidecar: it counts for the policies
	// that select every injected pod of its namespace, and no other (rate
	// sharing, status.selectedPods).
	MaxPodLabelBytes = 16 << 10
)

// CacheOptions are the manager's cache settings (the table above); managed
// fields are dropped from every cached object. A read of a kind no controller
// watches fails (ReaderFailOnMissingInformer) instead of starting a cache of
// every object of that kind in the cluster: such a kind is read past the
// cache (the manager's API reader) or added to the table above.
func CacheOptions() cache.Options {
	return cache.Options{
		ReaderFailOnMissingInformer: true,
		// HTTPRoute is cut down by the default transform: a ByObject entry
		// needs its CRD at start, and a cluster may have none (GatewayAPI).
		DefaultTransform: func(o any) (any, error) {
			o, err := cache.TransformStripManagedFields()(o)
			if err != nil {
				return o, err
			}
			return slimRoute(o)
		},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Service{}: {Transform: slimService},
			&corev1.ConfigMap{}: {
				Field:     fields.OneTermEqualSelector("metadata.name", v1alpha1.PoliciesConfigMapName),
				Transform: slimRenderedConfigMap,
			},
			&corev1.Pod{}: {
				Label:     labels.SelectorFromSet(labels.Set{v1alpha1.LabelSidecar: v1alpha1.LabelSidecarInjected}),
				Transform: slimPod,
			},
			&rbacv1.RoleBinding{}: {
				Label:     labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue}),
				Field:     fields.OneTermEqualSelector("metadata.name", SidecarRoleBindingName),
				Transform: slimRoleBinding,
			},
			&corev1.Namespace{}:     {Transform: slimNamespace},
			&v1alpha1.RetryPolicy{}: {Transform: withoutAnnotations},
		},
	}
}

// otherKeysMarker stands, in a cached retry-policies ConfigMap, for every
// key besides policies.json (their values are not kept), so that
// applyConfigMap still sees a ConfigMap that holds more than it rendered.
const otherKeysMarker = "..."

// slimRenderedConfigMap keeps of a retry-policies ConfigMap what
// applyConfigMap and previousDocument read: policies.json, the managed-by
// label and the owners.
func slimRenderedConfigMap(o any) (any, error) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return o, nil
	}
	slim := &corev1.ConfigMap{TypeMeta: cm.TypeMeta, ObjectMeta: slimMeta(&cm.ObjectMeta, ManagedByLabel)}
	slim.OwnerReferences = cm.OwnerReferences
	for k, v := range cm.Data {
		if slim.Data == nil {
			slim.Data = map[string]string{}
		}
		if k == v1alpha1.PoliciesConfigMapKey {
			slim.Data[k] = v
		} else {
			slim.Data[otherKeysMarker] = ""
		}
	}
	if len(cm.BinaryData) > 0 {
		if slim.Data == nil {
			slim.Data = map[string]string{}
		}
		slim.Data[otherKeysMarker] = ""
	}
	return slim, nil
}

// slimRoleBinding keeps of the sidecars' RoleBinding what applySidecarBinding
// compares.
func slimRoleBinding(o any) (any, error) {
	rb, ok := o.(*rbacv1.RoleBinding)
	if !ok {
		return o, nil
	}
	slim := &rbacv1.RoleBinding{TypeMeta: rb.TypeMeta, ObjectMeta: slimMeta(&rb.ObjectMeta, ManagedByLabel),
		RoleRef: rb.RoleRef, Subjects: rb.Subjects}
	slim.OwnerReferences = rb.OwnerReferences
	return slim, nil
}

// slimPod keeps of an injected pod what rate sharing, status.programmedPods
// and the sidecars' RoleBinding read: its labels (all of them, or only
// retry.dev/sidecar beyond MaxPodLabelBytes), service account, IP and
// readiness.
func slimPod(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: slimMeta(&p.ObjectMeta)}
	slim.Labels = p.Labels
	if labelBytes(p.Labels) > MaxPodLabelBytes {
		slim.Labels = map[string]string{v1alpha1.LabelSidecar: p.Labels[v1alpha1.LabelSidecar]}
	}
	slim.Spec.ServiceAccountName = p.Spec.ServiceAccountName
	slim.Status.PodIP = p.Status.PodIP
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// slimNamespace keeps a Namespace's labels and annotations (the injector's
// opt-in, interception and Pod Security settings, the sidecars' API access).
func slimNamespace(o any) (any, error) {
	ns, ok := o.(*corev1.Namespace)
	if !ok {
		return o, nil
	}
	slim := &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: slimMeta(&ns.ObjectMeta)}
	slim.Labels, slim.Annotations = ns.Labels, ns.Annotations
	return slim, nil
}

// withoutAnnotations drops managed fields and annotations (kubectl's
// last-applied copy of the spec among them), which no controller reads.
func withoutAnnotations(o any) (any, error) {
	if obj, ok := o.(client.Object); ok {
		obj.SetManagedFields(nil)
		obj.SetAnnotations(nil)
	}
	return o, nil
}

// slimMeta is the identity of an object (name, namespace, UID, resource
// version, generation, deletion) and the labels named in keep.
func slimMeta(m *metav1.ObjectMeta, keep ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp}
	for _, k := range keep {
		if v, ok := m.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	return out
}

func labelBytes(l map[string]string) int {
	n := 0
	for k, v := range l {
		n += len(k) + len(v)
	}
	return n
}
