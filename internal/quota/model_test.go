package quota_test

import (
	"testing"

	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/quotatest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
)

// The Model passes the lease table the script passes too (redisstore).
func TestModelFollowsTheLeaseTable(t *testing.T) {
	quotatest.Run(t, func(_ *testing.T, clk *clocktest.Clock) quota.Store { return quota.NewModel(clk) })
}
