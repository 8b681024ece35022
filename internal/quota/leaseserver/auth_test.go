package leaseserver

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

// jwt is an unsigned token with the claims given: enough for the checks made
// before a TokenReview, which alone verifies a signature.
func jwt(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("signature"))
}

// TestTokensRefusedWithoutATokenReview: what a TokenReview would refuse is
// refused before one is sent (the reviewer here has no client: a review
// would panic).
func TestTokensRefusedWithoutATokenReview(t *testing.T) {
	now := time.Unix(1796083200, 0)
	r := NewTokenReviewer(nil, func() time.Time { return now })
	for name, token := range map[string]string{
		"not a JWT":                           "garbage",
		"a payload that is not base64":        "a.%%%.c",
		"a payload that is not JSON":          "a." + base64.RawURLEncoding.EncodeToString([]byte("x")) + ".c",
		"expired a second ago":                jwt(`{"exp":1796083199,"aud":["quota.retry.dev"]}`),
		"without expiry":                      jwt(`{"aud":["quota.retry.dev"]}`),
		"for the API server's audience":       jwt(`{"exp":1796086800,"aud":["https://kubernetes.default.svc"]}`),
		"for another audience, as one string": jwt(`{"exp":1796086800,"aud":"vault"}`),
		"longer than MaxTokenBytes":           jwt(`{"exp":1796086800,"aud":"quota.retry.dev","x":"` + strings.Repeat("x", MaxTokenBytes) + `"}`),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := r.Authenticate(context.Background(), token); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("Authenticate = %v, want ErrUnauthenticated", err)
			}
		})
	}
}
