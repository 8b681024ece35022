// Package startupcheck answers, from outside the manager, the question a
// platform team asks right after an install: would `kubectl apply` of a
// RetryPolicy be admitted now? It asks the API server to create a probe
// policy as a dry run, which the API server sends through the validating
// webhook by way of its Service, exactly as a user's apply, and tries again
// until one is admitted (docs/operations.md#install).
//
// A Ready manager pod is not enough: the API server reaches the webhook
// through the Service's cluster IP, which routes only once the endpoints
// controller and kube-proxy have caught up with the pod's readiness; until
// then the call is refused ("connect: connection refused"). The chart runs
// this check as a post-install and post-upgrade hook (the manager image,
// subcommand startupapicheck), as cert-manager's startupapicheck does, so
// `helm install --wait` returns only once admission works.
package startupcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// ProbeName is the name of the policy the check creates as a dry run: it is
// never stored.
const ProbeName = "retry-operator-startupapicheck"

// Check asks the API server to admit a probe policy in Namespace.
type Check struct {
	// Client writes with the rights of the hook's service account: create on
	// retrypolicies in Namespace, nothing else.
	Client    client.Client
	Namespace string
	// Interval is the wait between tries; 0 is one second.
	Interval time.Duration
	Log      logr.Logger
}

// Probe is the policy the check submits: the smallest valid one.
func Probe(namespace string) *v1alpha1.RetryPolicy {
	return &v1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ProbeName},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{
			Name:  "probe",
			Hosts: []string{"startupapicheck.invalid"},
		}}},
	}
}

// Once submits the probe as a dry run: nil when the API server admitted it,
// webhooks included.
func (c Check) Once(ctx context.Context) error {
	return c.Client.Create(ctx, Probe(c.Namespace), client.DryRunAll)
}

// Run tries Once until it succeeds or ctx ends, and returns the number of
// tries and, when it never succeeded, the last refusal.
func (c Check) Run(ctx context.Context) (int, error) {
	interval := c.Interval
	if interval <= 0 {
		interval = time.Second
	}
	var last error
	for tries := 1; ; tries++ {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Once(tctx)
		cancel()
		if err == nil {
			c.Log.Info("a RetryPolicy is admitted: the webhook answers through its Service", "tries", tries)
			return tries, nil
		}
		if ctx.Err() == nil || last == nil {
			// A try cut by the check's own deadline only says so; the
			// error before it says why admission failed (a loaded machine
			// once turned the webhook's refusal into "context deadline
			// exceeded" in TestTheCheckGivesUpWithTheLastRefusal).
			last = err
		}
		c.Log.Info("a RetryPolicy is not admitted yet", "try", tries, "error", err.Error())
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return tries, fmt.Errorf("admission did not work within the timeout, last error: %w", last)
			}
			return tries, ctx.Err()
		case <-time.After(interval):
		}
	}
}
