package quotastore

import (
	"context"
	"errors"
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
	"github.com/retrydev/retry-operator/internal/redistest"
	"github.com/retrydev/retry-operator/internal/testenv"
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

// TestNamespaceUserIsLimitedToItsQuotas runs the commands a sidecar needs,
// and the ones it must not have, as the ACL user SetUser creates.
func TestNamespaceUserIsLimitedToItsQuotas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t, redistest.WithPassword("admin-pw"))
	admin := srv.Client()
	if err := SetUser(ctx, admin, "shop", "shop-pw", []string{"partner-payments"}); err != nil {
		t.Fatal(err)
	}
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: v1alpha1.QuotaUser("shop"), Password: "shop-pw", MaxRetries: -1})
	defer user.Close()
	own := v1alpha1.QuotaKeys("partner-payments") + "tokens"
	other := v1alpha1.QuotaKeys("someone-else") + "tokens"
	script := redis.NewScript(`redis.call('HSET', KEYS[1], 'tokens', ARGV[1]); return redis.call('TIME')[1]`)
	for name, tc := range map[string]struct {
		run     func() error
		allowed bool
	}{
		"PING":                             {run: func() error { return user.Ping(ctx).Err() }, allowed: true},
		"a script on the quota's keys":     {run: func() error { return script.Run(ctx, user, []string{own}, 5).Err() }, allowed: true},
		"HGETALL on the quota's keys":      {run: func() error { return user.HGetAll(ctx, own).Err() }, allowed: true},
		"TIME":                             {run: func() error { return user.Time(ctx).Err() }, allowed: true},
		"a script on another quota's keys": {run: func() error { return script.Run(ctx, user, []string{other}, 5).Err() }},
		"GET of another quota's key":       {run: func() error { return user.Get(ctx, other).Err() }},
		"KEYS":                             {run: func() error { return user.Keys(ctx, "*").Err() }},
		"SCAN":                             {run: func() error { return user.Scan(ctx, 0, "*", 10).Err() }},
		"FLUSHALL":                         {run: func() error { return user.FlushAll(ctx).Err() }},
		"CONFIG GET":                       {run: func() error { return user.ConfigGet(ctx, "requirepass").Err() }},
		"ACL LIST":                         {run: func() error { return user.Do(ctx, "ACL", "LIST").Err() }},
		"SCRIPT FLUSH":                     {run: func() error { return user.ScriptFlush(ctx).Err() }},
		"PUBLISH":                          {run: func() error { return user.Publish(ctx, "c", "m").Err() }},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.run()
			if tc.allowed && err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("%s as the namespace's user: %v; want it allowed", name, err)
			}
			if !tc.allowed && (err == nil || !strings.HasPrefix(err.Error(), "NOPERM")) {
				t.Fatalf("%s as the namespace's user: %v; want NOPERM", name, err)
			}
		})
	}

	if err := DelUser(ctx, admin, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := user.Ping(ctx).Err(); err == nil {
		t.Fatal("PING as a deleted user succeeded; want its connection closed and AUTH refused")
	}
	again := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: v1alpha1.QuotaUser("shop"), Password: "shop-pw", MaxRetries: -1})
	defer again.Close()
	var p *Problem
	if err := Classify(again.Ping(ctx).Err()); !errors.As(err, &p) || p.Reason != v1alpha1.ReasonAuthFailed {
		t.Fatalf("a new connection as the deleted user = %v, want AuthFailed", err)
	}
	if err := DelUser(ctx, admin, "shop"); err != nil {
		t.Fatalf("deleting a user twice: %v, want nil", err)
	}
}
