#!/usr/bin/env bash
# Scale benchmark of the manager (docs/performance.md), run by `make bench-controller`:
# 1,000 RetryPolicies in 100 namespaces until all Accepted, 60 s of steady state
# (writes counted), 200 pod creates through the injection webhook (latency).
# Needs the envtest binaries in bin/k8s/<version> (hack/kube-binaries.sh) or
# $KUBEBUILDER_ASSETS. BENCH_STEADY=10s shortens the steady state; BENCH_OUT=file
# also writes the report there. `run.sh -run TestConvergence` instead measures what
# one policy edit costs until 20 pods are programmed (docs/fleet.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go test -v -tags bench -run '^TestScale$' -count=1 -timeout 20m ./bench/controller/ "$@"
