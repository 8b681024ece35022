package quotastore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// SidecarCommands are the command rules of a namespace's ACL user: what the
// sidecar's quota client runs (scripts and the commands they call on the
// quota's keys, PING, TIME) and nothing that reaches beyond its keys
// (no KEYS, SCAN, FLUSHALL, CONFIG, script or function management).
var SidecarCommands = []string{
	"-@all",
	"+@read", "+@write", "+@scripting", "+ping", "+time",
	"+client|setname", "+hello",
	"-@dangerous", "-@admin", "-scan", "-randomkey", "-keys",
	"-script|flush", "-script|kill", "-function",
}

// UserRules are the ACL SETUSER rules of the user of a namespace that may use
// the quotas named: enabled, this password only, the keys of those quotas
// only (v1alpha1.QuotaKeys), no Pub/Sub channel, SidecarCommands.
func UserRules(password string, quotas []string) []any {
	rules := []any{"reset", "on", ">" + password, "resetchannels"}
	for _, q := range quotas {
		rules = append(rules, "~"+v1alpha1.QuotaKeys(q)+"*")
	}
	for _, c := range SidecarCommands {
		rules = append(rules, c)
	}
	return rules
}

// SetUser creates or replaces the ACL user of namespace ns on the store c,
// limited to the quotas named (UserRules).
func SetUser(ctx context.Context, c *redis.Client, ns, password string, quotas []string) error {
	args := append([]any{"ACL", "SETUSER", v1alpha1.QuotaUser(ns)}, UserRules(password, quotas)...)
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("ACL SETUSER %s: %w", v1alpha1.QuotaUser(ns), Classify(err))
	}
	return nil
}

// DelUser deletes the ACL user of namespace ns from the store c, and closes
// the connections authenticated as it (Redis does so on ACL DELUSER). A user
// that does not exist is no error.
func DelUser(ctx context.Context, c *redis.Client, ns string) error {
	if err := c.Do(ctx, "ACL", "DELUSER", v1alpha1.QuotaUser(ns)).Err(); err != nil {
		return fmt.Errorf("ACL DELUSER %s: %w", v1alpha1.QuotaUser(ns), Classify(err))
	}
	return nil
}
