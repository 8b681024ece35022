package storeadmin

import (
	"context"
	"fmt"
	"strings"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// DeleteLegacyUsers deletes from store the per-namespace ACL users
// (v1alpha1.LegacyQuotaUserPrefix + namespace) that earlier releases created
// and the lease endpoint made useless: with them a tenant could run scripts
// on the store (docs/operations.md#upgrade). Redis closes their connections.
// It returns the users deleted; a store that refuses ACL commands to the
// admin is an error (a *Problem).
func (a Admin) DeleteLegacyUsers(ctx context.Context, store v1alpha1.RedisStore) ([]string, error) {
	c, err := a.Connect(ctx, store)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	users, err := c.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("ACL USERS: %w", Classify(err))
	}
	var deleted []string
	for _, u := range users {
		if !strings.HasPrefix(u, v1alpha1.LegacyQuotaUserPrefix) {
			continue
		}
		if err := c.Do(ctx, "ACL", "DELUSER", u).Err(); err != nil {
			return deleted, fmt.Errorf("ACL DELUSER %s: %w", u, Classify(err))
		}
		deleted = append(deleted, u)
	}
	return deleted, nil
}
