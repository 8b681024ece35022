package storeadmin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// secrets starts an API server holding the Secrets in namespace ops and
// returns a client of it.
func secrets(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(testenv.Start(t, nil), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func adminSecret(name, user, password string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: name}, Data: map[string][]byte{}}
	if user != "" {
		s.Data[SecretUsernameKey] = []byte(user)
	}
	if password != "" {
		s.Data[SecretPasswordKey] = []byte(password)
	}
	return s
}

func TestPingReportsWhyAStoreCannotBeUsed(t *testing.T) {
	srv := redistest.Start(t, redistest.WithPassword("admin-pw"))
	stopped := redistest.Start(t)
	stopped.Stop()
	admin := Admin{Namespace: "ops", Reader: secrets(t,
		adminSecret("good", "", "admin-pw"), adminSecret("wrong", "default", "nope"), adminSecret("empty", "default", ""))}
	ref := func(name string) *v1alpha1.SecretRef { return &v1alpha1.SecretRef{Name: name} }
	for name, tc := range map[string]struct {
		store      v1alpha1.RedisStore
		wantReason v1alpha1.ConditionReason // "" for reachable
		wantInMsg  string
	}{
		"the admin password answers PING": {store: v1alpha1.RedisStore{Address: srv.Addr, CredentialsSecretRef: ref("good")}},
		"a wrong password is AuthFailed": {store: v1alpha1.RedisStore{Address: srv.Addr, CredentialsSecretRef: ref("wrong")},
			wantReason: v1alpha1.ReasonAuthFailed, wantInMsg: "WRONGPASS"},
		"no credentials against a password-protected store is AuthFailed": {store: v1alpha1.RedisStore{Address: srv.Addr},
			wantReason: v1alpha1.ReasonAuthFailed, wantInMsg: "NOAUTH"},
		"a Secret that does not exist is CredentialsNotFound": {store: v1alpha1.RedisStore{Address: srv.Addr, CredentialsSecretRef: ref("missing")},
			wantReason: v1alpha1.ReasonCredentialsNotFound, wantInMsg: "Secret ops/missing (store.redis.credentialsSecretRef) does not exist"},
		"a Secret without a password is CredentialsNotFound": {store: v1alpha1.RedisStore{Address: srv.Addr, CredentialsSecretRef: ref("empty")},
			wantReason: v1alpha1.ReasonCredentialsNotFound, wantInMsg: "Secret ops/empty (store.redis.credentialsSecretRef) has no key password"},
		"a stopped store is Unreachable": {store: v1alpha1.RedisStore{Address: stopped.Addr},
			wantReason: v1alpha1.ReasonUnreachable, wantInMsg: "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := admin.Ping(ctx, tc.store)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("Ping = %v, want nil", err)
				}
				return
			}
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("Ping = %v, want a *Problem with reason %s", err, tc.wantReason)
			}
			if p.Reason != tc.wantReason || !strings.Contains(p.Message, tc.wantInMsg) {
				t.Errorf("Ping = %s: %s; want %s with %q", p.Reason, p.Message, tc.wantReason, tc.wantInMsg)
			}
			if strings.Contains(p.Message, "admin-pw") || strings.Contains(p.Message, "nope") {
				t.Errorf("the message shows a password: %s", p.Message)
			}
		})
	}
}

// TestLegacyNamespaceUsersAreDeleted: the users an earlier release created
// per namespace go, with their connections; other users stay.
func TestLegacyNamespaceUsersAreDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.WithPassword("admin-pw"))
	root := srv.Client()
	for _, u := range []string{"retry-operator:ns:shop", "retry-operator:ns:search", "someone-else"} {
		if err := root.Do(ctx, "ACL", "SETUSER", u, "on", ">pw", "~*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	tenant := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "retry-operator:ns:shop", Password: "pw", MaxRetries: -1})
	defer tenant.Close()
	if err := tenant.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	admin := Admin{Namespace: "ops", Reader: secrets(t, adminSecret("admin", "", "admin-pw"))}
	store := v1alpha1.RedisStore{Address: srv.Addr, CredentialsSecretRef: &v1alpha1.SecretRef{Name: "admin"}}
	deleted, err := admin.DeleteLegacyUsers(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"retry-operator:ns:search", "retry-operator:ns:shop"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	users, err := root.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"default", "someone-else"}; !slices.Equal(users, want) {
		t.Errorf("users left %v, want %v", users, want)
	}
	if err := tenant.Ping(ctx).Err(); err == nil {
		t.Error("the deleted user's connection still answers PING; want it closed and AUTH refused")
	}
}
