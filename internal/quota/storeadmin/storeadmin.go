// Package storeadmin is the manager's side of a SharedQuota's Redis store: it
// connects with the admin credentials of store.redis.credentialsSecretRef (a
// Secret of the manager's own namespace, never another), checks the store
// answers (condition StoreReachable), keeps the stores the lease endpoint
// leases through (Pool), and deletes the per-namespace ACL users earlier
// releases created (docs/quota.md#trust).
package storeadmin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
)

// Timeout bounds one store operation of the manager: a store that does not
// answer within it is Unreachable, and a reconcile never hangs on it.
const Timeout = 3 * time.Second

// Keys of the admin credentials Secret.
const (
	SecretUsernameKey = "username"
	SecretPasswordKey = "password"
)

// Admin reaches quota stores with the admin credentials, read from Secrets in
// the manager's namespace.
type Admin struct {
	// Reader reads the admin Secrets: an uncached reader, so the manager
	// neither lists nor watches Secrets (config/rbac).
	Reader client.Reader
	// Namespace is the manager's namespace, where credentialsSecretRef points.
	Namespace string
}

// Problem is why a store cannot be used, as the condition reason and message
// of StoreReachable=False.
type Problem struct {
	Reason  v1alpha1.ConditionReason
	Message string
}

func (p *Problem) Error() string { return string(p.Reason) + ": " + p.Message }

// Connect returns a client of the store authenticated as the admin (none when
// the store has no credentialsSecretRef). It does not contact the store; a
// missing Secret or password is a *Problem with ReasonCredentialsNotFound.
func (a Admin) Connect(ctx context.Context, store v1alpha1.RedisStore) (*redis.Client, error) {
	user, password, err := a.credentials(ctx, store)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(&redis.Options{Addr: store.Address, DialTimeout: Timeout, ReadTimeout: Timeout, WriteTimeout: Timeout,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true, Username: user, Password: password}), nil
}

// credentials are the admin user and password of store, read from the Secret
// of its credentialsSecretRef in the manager's namespace ("" and "" without
// one): never from any other namespace.
func (a Admin) credentials(ctx context.Context, store v1alpha1.RedisStore) (user, password string, err error) {
	ref := store.CredentialsSecretRef
	if ref == nil {
		return "", "", nil
	}
	var s corev1.Secret
	err = a.Reader.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: ref.Name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return "", "", &Problem{v1alpha1.ReasonCredentialsNotFound, fmt.Sprintf("Secret %s/%s (store.redis.credentialsSecretRef) does not exist", a.Namespace, ref.Name)}
	case err != nil:
		return "", "", fmt.Errorf("reading Secret %s/%s: %w", a.Namespace, ref.Name, err)
	case len(s.Data[SecretPasswordKey]) == 0:
		return "", "", &Problem{v1alpha1.ReasonCredentialsNotFound, fmt.Sprintf("Secret %s/%s (store.redis.credentialsSecretRef) has no key %s", a.Namespace, ref.Name, SecretPasswordKey)}
	}
	return string(s.Data[SecretUsernameKey]), string(s.Data[SecretPasswordKey]), nil
}

// Ping checks the store answers the admin: nil, or a *Problem with reason
// Unreachable, AuthFailed or CredentialsNotFound (or another error when the
// Secret could not be read).
func (a Admin) Ping(ctx context.Context, store v1alpha1.RedisStore) error {
	c, err := a.Connect(ctx, store)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return Classify(c.Ping(ctx).Err())
}

// Classify turns a store error into a *Problem: the server's refusal of the
// credentials (WRONGPASS, NOAUTH, NOPERM) is AuthFailed, anything else
// Unreachable. nil stays nil.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		if _, refused := quota.RefusalCode(re); refused {
			return &Problem{v1alpha1.ReasonAuthFailed, re.Error()}
		}
	}
	return &Problem{v1alpha1.ReasonUnreachable, err.Error()}
}
