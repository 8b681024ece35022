package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/webhook/startupcheck"
)

// startupAPICheck is `manager startupapicheck`: it waits until the API server
// admits a RetryPolicy (a dry run through the validating webhook's Service)
// and exits 0, or exits 1 with the last refusal after --timeout. The chart
// runs it as a post-install and post-upgrade hook (docs/operations.md#install).
func startupAPICheck(args []string) int {
	fs := flag.NewFlagSet("startupapicheck", flag.ContinueOnError)
	ns := fs.String("namespace", envOr("POD_NAMESPACE", v1alpha1.OperatorNamespace),
		"Namespace of the probe policy (created as a dry run, never stored); the hook's service account may create retrypolicies there.")
	timeout := fs.Duration("timeout", 2*time.Minute, "How long to keep trying before failing.")
	interval := fs.Duration("interval", time.Second, "Wait between tries.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("startupapicheck")
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no API server configuration")
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		log.Error(err, "API client")
		return 1
	}
	ctx, cancel := context.WithTimeout(ctrl.SetupSignalHandler(), *timeout)
	defer cancel()
	check := startupcheck.Check{Client: c, Namespace: *ns, Interval: *interval, Log: log}
	if _, err := check.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "startupapicheck:", err)
		return 1
	}
	return 0
}
