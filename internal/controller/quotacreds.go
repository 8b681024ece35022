package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/quotastore"
)

// The per-namespace credentials of quota stores (docs/quota.md#credentials):
// the namespace's sidecars authenticate as one Redis ACL user, on every store
// of the quotas the namespace may use, limited to those quotas' keys. Its
// password lives in the Secret retry-quota-credentials of the namespace, which
// the injector mounts into the retry-sidecar container only.
//
// The manager creates that Secret and writes, patches, reads and deletes it by
// name only; it never lists or watches Secrets.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,resourceNames=retry-quota-credentials,verbs=get;patch;delete

// QuotaCredentialsRecheck is how often a namespace with quota credentials is
// reconciled again, so an ACL user lost with a store's memory (a restart
// without persistence) is created again.
const QuotaCredentialsRecheck = time.Minute

// AnnotationQuotaStores on the credentials Secret records the stores the
// namespace's user was created on (JSON), so leaving a quota deletes it there
// even when the quota itself is gone.
const AnnotationQuotaStores = "retry.dev/quota-stores"

// storeGrant is what the namespace's user may do on one store: the quotas
// (by name) whose keys it may touch.
type storeGrant struct {
	Store  v1alpha1.RedisStore `json:"store"`
	Quotas []string            `json:"-"`
}

// quotaGrants are the stores and quotas the namespace's user needs, sorted by
// address: every quota of the rendering that the namespace may use now and
// whose store has admin credentials (a store without them needs no user).
// A quota kept from an earlier rendering (the namespace left its consumers)
// grants nothing: leaving revokes.
func quotaGrants(in Input, doc policyset.Document) []storeGrant {
	byStore := map[string]*storeGrant{}
	for _, rq := range doc.Quotas {
		if _, ok := usableQuota(rq.Name, in); !ok {
			continue
		}
		q := in.Quotas[rq.Name]
		if q.Spec.Store.Redis.CredentialsSecretRef == nil {
			continue
		}
		key := q.Spec.Store.Redis.Address + " " + q.Spec.Store.Redis.CredentialsSecretRef.Name
		g, ok := byStore[key]
		if !ok {
			g = &storeGrant{Store: *q.Spec.Store.Redis.DeepCopy()}
			byStore[key] = g
		}
		g.Quotas = append(g.Quotas, q.Name)
	}
	out := make([]storeGrant, 0, len(byStore))
	for _, g := range byStore {
		slices.Sort(g.Quotas)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b storeGrant) int {
		return strings.Compare(a.Store.Address+" "+a.Store.CredentialsSecretRef.Name, b.Store.Address+" "+b.Store.CredentialsSecretRef.Name)
	})
	return out
}

// applyQuotaCredentials makes the namespace's ACL user exist on the stores of
// grants with exactly those quotas, deletes it from the stores it no longer
// needs, and keeps the Secret to match (deleted with the last grant). The
// Secret is written only when its content changes.
func (r *RetryPolicyReconciler) applyQuotaCredentials(ctx context.Context, ns string, grants []storeGrant) error {
	secret, exists, err := r.quotaSecret(ctx, ns)
	if err != nil {
		return err
	}
	if !exists && len(grants) == 0 {
		return nil
	}
	previous := recordedStores(secret)
	var errs []error
	for _, s := range previous {
		if !slices.ContainsFunc(grants, func(g storeGrant) bool { return sameStore(g.Store, s) }) {
			errs = append(errs, r.onStore(ctx, s, func(ctx context.Context, c storeClient) error { return quotastore.DelUser(ctx, c, ns) }))
		}
	}
	if len(grants) == 0 {
		if err := errors.Join(errs...); err != nil {
			return err // keep the record until every store forgot the user
		}
		if err := r.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s/%s: %w", ns, v1alpha1.QuotaCredentialsSecretName, err)
		}
		logf.FromContext(ctx).Info("revoked quota credentials: the namespace uses no SharedQuota", "secret", v1alpha1.QuotaCredentialsSecretName)
		return nil
	}
	creds := policyset.Credentials{Username: v1alpha1.QuotaUser(ns)}
	if exists {
		if old, err := policyset.ParseCredentials(secret.Data[v1alpha1.QuotaCredentialsSecretKey]); err == nil && old.Username == creds.Username {
			creds.Password = old.Password
		}
	}
	if creds.Password == "" {
		creds.Password = newPassword()
	}
	// The Secret first: a user whose password no Secret holds would be
	// unusable, and the record must name every store before the user exists there.
	if err := r.writeQuotaSecret(ctx, ns, secret, exists, creds, grants); err != nil {
		return err
	}
	for _, g := range grants {
		errs = append(errs, r.onStore(ctx, g.Store, func(ctx context.Context, c storeClient) error {
			return quotastore.SetUser(ctx, c, ns, creds.Password, g.Quotas)
		}))
	}
	return errors.Join(errs...)
}

// storeClient is a store connected as the admin.
type storeClient = *redis.Client

// onStore runs f against the store s, connected as the admin, bounded in time.
func (r *RetryPolicyReconciler) onStore(ctx context.Context, s v1alpha1.RedisStore, f func(context.Context, storeClient) error) error {
	c, err := r.QuotaStore.Connect(ctx, s)
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Address, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, quotastore.Timeout)
	defer cancel()
	if err := f(ctx, c); err != nil {
		return fmt.Errorf("store %s: %w", s.Address, err)
	}
	return nil
}

// quotaSecret reads the namespace's credentials Secret past the cache.
func (r *RetryPolicyReconciler) quotaSecret(ctx context.Context, ns string) (*corev1.Secret, bool, error) {
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	var s corev1.Secret
	err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: v1alpha1.QuotaCredentialsSecretName}, &s)
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading Secret %s/%s: %w", ns, v1alpha1.QuotaCredentialsSecretName, err)
	}
	return &s, true, nil
}

// writeQuotaSecret creates or patches the Secret to hold creds and the record
// of grants' stores, when it does not already.
func (r *RetryPolicyReconciler) writeQuotaSecret(ctx context.Context, ns string, s *corev1.Secret, exists bool, creds policyset.Credentials, grants []storeGrant) error {
	stores := make([]v1alpha1.RedisStore, 0, len(grants))
	for _, g := range grants {
		stores = append(stores, g.Store)
	}
	record, err := json.Marshal(stores)
	if err != nil {
		return err
	}
	data := creds.Format()
	if exists && string(s.Data[v1alpha1.QuotaCredentialsSecretKey]) == string(data) && s.Annotations[AnnotationQuotaStores] == string(record) {
		return nil
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.QuotaCredentialsSecretName,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{AnnotationQuotaStores: string(record)}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{v1alpha1.QuotaCredentialsSecretKey: data},
	}
	if !exists {
		if err := r.Create(ctx, want); err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", ns, v1alpha1.QuotaCredentialsSecretName, err)
		}
		return nil
	}
	if err := r.Patch(ctx, want, client.MergeFrom(s)); err != nil {
		return fmt.Errorf("updating Secret %s/%s: %w", ns, v1alpha1.QuotaCredentialsSecretName, err)
	}
	return nil
}

// recordedStores are the stores the Secret's annotation records.
func recordedStores(s *corev1.Secret) []v1alpha1.RedisStore {
	var stores []v1alpha1.RedisStore
	if v := s.Annotations[AnnotationQuotaStores]; v != "" {
		_ = json.Unmarshal([]byte(v), &stores) // a hand-edited record names no store
	}
	return stores
}

func sameStore(a, b v1alpha1.RedisStore) bool {
	return a.Address == b.Address && (a.CredentialsSecretRef == nil) == (b.CredentialsSecretRef == nil) &&
		(a.CredentialsSecretRef == nil || a.CredentialsSecretRef.Name == b.CredentialsSecretRef.Name)
}

// newPassword is 32 random bytes, hex: Redis compares passwords by their
// SHA-256, so length costs nothing.
func newPassword() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
