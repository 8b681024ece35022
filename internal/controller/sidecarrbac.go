package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// The sidecars' read access to their namespace's retry-policies ConfigMap
// (docs/fleet.md): one ClusterRole, shipped in config/rbac/sidecar_role.yaml,
// that allows get, list and watch on configmaps named retry-policies and
// nothing else, and in every namespace with injected pods a RoleBinding of it
// to the service accounts those pods run as (a sidecar authenticates as its
// pod's service account), not to every service account of the namespace. A
// RoleBinding grants a ClusterRole's rules only inside its own namespace, so a
// sidecar reads its own namespace's retry-policies and no other object.
const (
	// DefaultSidecarClusterRole is the ClusterRole's name after config/default's
	// namePrefix. The manager may bind only this ClusterRole (the bind marker
	// below names it).
	DefaultSidecarClusterRole = "retry-operator-sidecar"
	// SidecarRoleBindingName is the RoleBinding the manager keeps in each
	// namespace with injected pods.
	SidecarRoleBindingName = "retry-sidecar"
)

// The manager reads, applies and deletes RoleBindings by name only: its cache
// lists and watches them with the field selector metadata.name=retry-sidecar
// (CacheOptions), which RBAC authorizes against resourceNames. Creating
// cannot be limited by name (the object has no name yet for RBAC to match).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;patch;delete,resourceNames=retry-sidecar
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;bind,resourceNames=retry-operator-sidecar

// podServiceAccounts are the service accounts the pods run as, sorted, each
// once; a pod without one runs as "default" (the API server's ServiceAccount
// admission names it).
func podServiceAccounts(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for i := range pods {
		names = append(names, cmp.Or(pods[i].Spec.ServiceAccountName, "default"))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// sidecarSubjects are the RoleBinding's subjects: each of accounts, a service
// account of namespace ns.
func sidecarSubjects(ns string, accounts []string) []rbacv1.Subject {
	subjects := make([]rbacv1.Subject, len(accounts))
	for i, sa := range accounts {
		subjects[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}
	}
	return subjects
}

// wantSidecarBinding reports whether namespace ns must have the RoleBinding:
// it has injected pods and does not opt out.
func wantSidecarBinding(nsObj *corev1.Namespace, injectedPods int) bool {
	return injectedPods > 0 && nsObj.Annotations[v1alpha1.AnnotationSidecarAPIAccess] != v1alpha1.SidecarAPIAccessDisabled
}

// applySidecarBinding creates, corrects or deletes the RoleBinding of namespace
// ns so that it exists exactly when want, naming the service accounts
// accounts. It writes nothing when the binding is already as it must be.
func (r *RetryPolicyReconciler) applySidecarBinding(ctx context.Context, ns string, want bool, accounts []string) error {
	role := r.sidecarClusterRole()
	var rb rbacv1.RoleBinding
	err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: SidecarRoleBindingName}, &rb)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading RoleBinding %s/%s: %w", ns, SidecarRoleBindingName, err)
	}
	log := logf.FromContext(ctx)
	if !want {
		if !exists {
			return nil
		}
		if err := r.Delete(ctx, &rb, client.Preconditions{UID: &rb.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting RoleBinding %s/%s: %w", ns, SidecarRoleBindingName, err)
		}
		log.Info("deleted the sidecars' RoleBinding", "roleBinding", SidecarRoleBindingName)
		return nil
	}
	subjects := sidecarSubjects(ns, accounts)
	bound := exists && rb.RoleRef.Kind == "ClusterRole" && rb.RoleRef.Name == role && rb.Labels[ManagedByLabel] == ManagedByValue &&
		slices.Equal(rb.Subjects, subjects)
	if bound && ownedByClusterRole(&rb, role) {
		return nil
	}
	owner, err := r.clusterRoleOwner(ctx, role)
	if err != nil {
		return err
	}
	if bound && owner == nil {
		// Nothing to own it yet (the ClusterRole is missing); the binding is
		// otherwise right.
		return nil
	}
	if exists && rb.RoleRef.Name != role {
		// roleRef is immutable: replace the binding.
		if err := r.Delete(ctx, &rb, client.Preconditions{UID: &rb.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replacing RoleBinding %s/%s: %w", ns, SidecarRoleBindingName, err)
		}
	}
	apply := rbacv1ac.RoleBinding(SidecarRoleBindingName, ns).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue}).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(role))
	for _, sub := range subjects {
		apply.WithSubjects(rbacv1ac.Subject().WithKind(sub.Kind).WithName(sub.Name).WithNamespace(sub.Namespace))
	}

	if owner != nil {
		apply.WithOwnerReferences(owner)
	}
	if err := r.Apply(ctx, apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying RoleBinding %s/%s: %w", ns, SidecarRoleBindingName, err)
	}
	log.Info("bound the sidecars' ClusterRole", "roleBinding", SidecarRoleBindingName, "clusterRole", role, "serviceAccounts", accounts)
	return nil
}

// ownedByClusterRole reports whether rb names the ClusterRole role among its
// owners.
func ownedByClusterRole(rb *rbacv1.RoleBinding, role string) bool {
	for _, o := range rb.OwnerReferences {
		if o.Kind == "ClusterRole" && o.Name == role && o.APIVersion == rbacv1.SchemeGroupVersion.String() {
			return true
		}
	}
	return false
}

// clusterRoleOwner is the owner reference every sidecar RoleBinding carries to
// the sidecars' ClusterRole, so that removing the operator (helm uninstall,
// kubectl delete of dist/install.yaml) removes the bindings it created: the
// garbage collector deletes a namespaced object whose cluster-scoped owner is
// gone (docs/operations.md, "Uninstall"). Nil when the ClusterRole does not
// exist. It is read past the cache (Reader), only when a binding is written,
// so the manager needs no list or watch of ClusterRoles.
func (r *RetryPolicyReconciler) clusterRoleOwner(ctx context.Context, role string) (*metav1ac.OwnerReferenceApplyConfiguration, error) {
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	var cr rbacv1.ClusterRole
	if err := reader.Get(ctx, types.NamespacedName{Name: role}, &cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ClusterRole %s: %w", role, err)
	}
	return metav1ac.OwnerReference().WithAPIVersion(rbacv1.SchemeGroupVersion.String()).WithKind("ClusterRole").
		WithName(cr.Name).WithUID(cr.UID), nil
}

func (r *RetryPolicyReconciler) sidecarClusterRole() string {
	if r.SidecarClusterRole == "" {
		return DefaultSidecarClusterRole
	}
	return r.SidecarClusterRole
}
