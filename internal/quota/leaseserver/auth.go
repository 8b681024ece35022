package leaseserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// Identity is the pod a verified token was issued to: the endpoint takes the
// namespace and the pod from it, never from the request.
type Identity struct {
	Namespace string
	Pod       string
	PodUID    string
}

// ErrUnauthenticated marks a token that is missing, malformed, expired,
// bound to another audience, refused by the API server or not bound to a
// pod: the endpoint answers 401, which the sidecar takes as revoked.
var ErrUnauthenticated = errors.New("the token does not authenticate a pod for " + v1alpha1.QuotaTokenAudience)

// ErrBusy marks a token the endpoint could not verify now because too many
// unknown tokens arrived at once: 429, a late lease, not a refusal.
var ErrBusy = errors.New("too many tokens to verify; try again")

// Authenticator verifies a bearer token of the lease endpoint.
type Authenticator interface {
	// Authenticate returns the pod the token was issued to; an error wrapping
	// ErrUnauthenticated when the token is not good, ErrBusy when it cannot
	// be checked now, or another error when the checker cannot tell (the API
	// server does not answer: 503, a lost store for the sidecar).
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// StaticTokens is an Authenticator of a fixed table of tokens: the tests and
// the quota benchmark, which run without an API server.
type StaticTokens map[string]Identity

// Authenticate implements Authenticator.
func (s StaticTokens) Authenticate(_ context.Context, token string) (Identity, error) {
	if id, ok := s[token]; ok {
		return id, nil
	}
	return Identity{}, ErrUnauthenticated
}

// Bounds of TokenReviewer.
const (
	// MaxTokenCache bounds the verified tokens kept (about 200 B each).
	MaxTokenCache = 1 << 16
	// MaxTokenCacheTime bounds how long a verified token is trusted without
	// asking again, whatever its expiry says.
	MaxTokenCacheTime = time.Hour
	// RefusedTokenCacheTime is how long a refused token is refused without
	// asking again: a replayed one costs the API server nothing.
	RefusedTokenCacheTime = 10 * time.Second
	// TokenReviewRate and TokenReviewBurst bound the TokenReviews sent for
	// tokens not in the cache: a fleet starting at once is verified over a
	// few seconds (its leases meanwhile answered 429), and a flood of made-up
	// tokens costs the API server no more than that.
	TokenReviewRate  = 100
	TokenReviewBurst = 200
)

// The extra keys of a TokenReview's user naming the pod a token is bound to.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// The lease endpoint verifies the sidecars' tokens; creating a TokenReview is
// the only right it needs for that (docs/operations.md#rbac).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// TokenReviewer verifies tokens with a TokenReview for the audience
// v1alpha1.QuotaTokenAudience, and keeps each answer for the token's
// lifetime (at most MaxTokenCacheTime; a refusal RefusedTokenCacheTime) in a
// bounded cache keyed by the token's SHA-256. Safe for concurrent use; create
// it with NewTokenReviewer.
type TokenReviewer struct {
	client  client.Client
	now     func() time.Time
	cache   *lru.Cache
	reviews *rate.Limiter
}

// NewTokenReviewer returns a TokenReviewer that creates TokenReviews with c
// (which needs create on authentication.k8s.io tokenreviews and nothing
// else); now is the clock, nil for time.Now.
func NewTokenReviewer(c client.Client, now func() time.Time) *TokenReviewer {
	if now == nil {
		now = time.Now
	}
	return &TokenReviewer{client: c, now: now, cache: lru.New(MaxTokenCache),
		reviews: rate.NewLimiter(TokenReviewRate, TokenReviewBurst)}
}

type verdict struct {
	id    Identity
	err   error
	until time.Time
}

// Authenticate implements Authenticator. A token that is not a JWT, has
// expired, or names another audience is refused without a TokenReview.
func (r *TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	now := r.now()
	exp, err := precheck(token, now)
	if err != nil {
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(token))
	if v, ok := r.cache.Get(key); ok {
		if v := v.(verdict); now.Before(v.until) {
			return v.id, v.err
		}
		r.cache.Remove(key)
	}
	if !r.reviews.AllowN(now, 1) {
		return Identity{}, ErrBusy
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: []string{v1alpha1.QuotaTokenAudience}}}
	if err := r.client.Create(ctx, tr); err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	id, err := identityOf(tr.Status)
	v := verdict{id: id, err: err, until: now.Add(MaxTokenCacheTime)}
	switch {
	case err != nil:
		v.until = now.Add(RefusedTokenCacheTime)
	case exp.Before(v.until):
		v.until = exp
	}
	r.cache.Add(key, v)
	return id, err
}

// identityOf is the pod of an answered TokenReview, or why there is none.
func identityOf(st authenticationv1.TokenReviewStatus) (Identity, error) {
	switch {
	case !st.Authenticated:
		return Identity{}, fmt.Errorf("%w: the API server refused it", ErrUnauthenticated)
	case !slices.Contains(st.Audiences, v1alpha1.QuotaTokenAudience):
		return Identity{}, fmt.Errorf("%w: not bound to audience %s", ErrUnauthenticated, v1alpha1.QuotaTokenAudience)
	}
	ns, ok := serviceAccountNamespace(st.User.Username)
	if !ok {
		return Identity{}, fmt.Errorf("%w: not a service account's token", ErrUnauthenticated)
	}
	pod, uid := st.User.Extra[extraPodName], st.User.Extra[extraPodUID]
	if len(pod) != 1 || len(uid) != 1 || pod[0] == "" || uid[0] == "" {
		return Identity{}, fmt.Errorf("%w: not bound to a pod", ErrUnauthenticated)
	}
	return Identity{Namespace: ns, Pod: pod[0], PodUID: uid[0]}, nil
}

// serviceAccountNamespace is the namespace of a service account's user name,
// system:serviceaccount:<namespace>:<name>.
func serviceAccountNamespace(user string) (string, bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", false
	}
	ns, name, ok := strings.Cut(rest, ":")
	return ns, ok && ns != "" && name != "" && !strings.Contains(name, ":")
}

// MaxTokenBytes bounds a token: a projected service-account token is about
// 1 KiB.
const MaxTokenBytes = 8 << 10

// precheck reads the unverified claims of a JWT only to refuse at once what a
// TokenReview would refuse (not a JWT, expired, another audience) and to
// learn when the token expires. The TokenReview is the authority; these
// claims decide nothing it has not confirmed.
func precheck(token string, now time.Time) (time.Time, error) {
	if len(token) > MaxTokenBytes {
		return time.Time{}, fmt.Errorf("%w: longer than %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	var c struct {
		Exp int64    `json:"exp"`
		Aud audience `json:"aud"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return time.Time{}, fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	exp := time.Unix(c.Exp, 0)
	switch {
	case c.Exp == 0 || !now.Before(exp):
		return time.Time{}, fmt.Errorf("%w: expired or without expiry", ErrUnauthenticated)
	case !slices.Contains(c.Aud, v1alpha1.QuotaTokenAudience):
		return time.Time{}, fmt.Errorf("%w: not bound to audience %s", ErrUnauthenticated, v1alpha1.QuotaTokenAudience)
	}
	return exp, nil
}

// audience is a JWT's aud claim: one string or a list of them.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte(`"`)) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = audience{s}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}
