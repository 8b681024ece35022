#!/usr/bin/env bash
# The end-to-end suite (test/e2e, build tag e2e) on a real cluster. `make test-e2e`
# builds the images first and calls this with E2E_CLUSTER:
#
#   hack/test-e2e.sh local      # the single-node cluster from source (hack/local-cluster.sh up: started if
#                               # needed, images re-imported if running); the default. The operator is
#                               # installed as README.md's "On your cluster" says (E2E_INSTALL=readme):
#                               # images pushed to the cluster's registry, helm install of dist/chart
#   hack/test-e2e.sh kind       # a kind cluster with the same images (hack/kind.sh up), for machines with Docker
#   hack/test-e2e.sh existing   # whatever KUBECONFIG names; the retry.dev/*:dev images must be on its nodes
#
# On kind and existing clusters (and with E2E_PULL_FROM_REGISTRY=0) the suite installs the
# operator from dist/install-selfsigned.yaml (the release artefact without cert-manager;
# `make build-installer` writes it) with the side-loaded images. It runs its cases in a
# fresh namespace and deletes that namespace. It never tears the cluster down: do that
# with `make cluster-down` (or `hack/kind.sh down`); CI does it in a trap.
#
# Environment: E2E_TIMEOUT (go test -timeout, default 20m), E2E_RUN (go test -run),
# E2E_KEEP_NAMESPACE=1 (keep the test namespace), KUBECTL (kubectl to use).
# E2E_LOCAL_CLUSTER (set for `local`): hack/local-cluster.sh, for the fault cases.
# E2E_INSTALL=readme, E2E_REGISTRY (set for `local`; E2E_PULL_FROM_REGISTRY=0 leaves them
# unset, the images side-loaded): run the README's install against that registry;
# HELM (make sets it): the helm binary the README's block finds on PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
START=$SECONDS
log() { printf 'test-e2e: [%3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cluster="${1:-local}"
case "$cluster" in
  local)
    log "ensuring the local cluster (hack/local-cluster.sh up; the first run builds Kubernetes from source, ~15 min)"
    # The operator's images come from the registry, not from the tarballs.
    if [[ "${E2E_PULL_FROM_REGISTRY:-1}" != 0 ]]; then
      export LOCAL_CLUSTER_NO_IMPORT="manager retry-sidecar"
    fi
    "$ROOT/hack/local-cluster.sh" up
    KUBECONFIG="$("$ROOT/hack/local-cluster.sh" kubeconfig 2>/dev/null)"
    # The fault cases (API server restart, sidecar container killed) drive the
    # node's processes through it; on other clusters they are skipped.
    export E2E_LOCAL_CLUSTER="$ROOT/hack/local-cluster.sh"
    if [[ "${E2E_PULL_FROM_REGISTRY:-1}" != 0 ]]; then
      # The README's block builds and pushes the images, then helm-installs them.
      E2E_REGISTRY="$("$ROOT/hack/local-cluster.sh" registry)"
      export E2E_INSTALL=readme E2E_REGISTRY
    fi
    ;;
  kind)
    log "ensuring the kind cluster (hack/kind.sh up)"
    "$ROOT/hack/kind.sh" up
    KUBECONFIG="$("$ROOT/hack/kind.sh" kubeconfig)"
    ;;
  existing)
    [[ -n "${KUBECONFIG:-}" ]] || die "E2E_CLUSTER=existing needs KUBECONFIG"
    ;;
  *) die "unknown cluster '$cluster': want local, kind or existing" ;;
esac
export KUBECONFIG

# kubectl for `kubectl kustomize | kubectl apply` in the suite: the source-built
# one when present, else the one on PATH (kind users).
if [[ -z "${KUBECTL:-}" ]]; then
  if [[ -x "$ROOT/bin/k8s/$KUBE_VERSION/kubectl" ]]; then
    KUBECTL="$ROOT/bin/k8s/$KUBE_VERSION/kubectl"
  elif command -v kubectl >/dev/null 2>&1; then
    KUBECTL="$(command -v kubectl)"
  else
    die "no kubectl: run hack/kube-binaries.sh or put kubectl on PATH"
  fi
fi
export KUBECTL

log "running the e2e suite against $cluster (KUBECONFIG=$KUBECONFIG)"
cd "$ROOT"
mkdir -p "$ROOT/bin"
out="$ROOT/bin/e2e-last.log"
set +e
go test -tags e2e ./test/e2e/ -v -count=1 -timeout "${E2E_TIMEOUT:-20m}" ${E2E_RUN:+-run "$E2E_RUN"} 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
if ((rc == 0)); then
  log "e2e passed in $((SECONDS - START))s"
else
  # A CI log may keep only its tail: repeat there the last log lines of each
  # failed case (its own lines, not the dumps under them) and the suite's
  # summary of the manager (the whole output is in bin/e2e-last.log).
  log "the failed cases' last lines and the manager's state (all of it: bin/e2e-last.log):"
  awk '
    /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
    /^--- (PASS|FAIL|SKIP)/ || /^ +--- (PASS|FAIL|SKIP)/ { if ($2 == "FAIL:" && $3 ~ /\//) failed[++n] = $3; next }
    /e2e-summary: / { sub(/.*e2e-summary: /, "  manager: "); summary[++m] = $0; next }
    cur != "" && /^    [^ ]+_test\.go:[0-9]+: / && !/: ----- / { lines[cur, ++count[cur]] = substr($0, 1, 400) }
    END {
      for (i = 1; i <= n; i++) {
        c = failed[i]; print "--- " c
        for (j = (count[c] > 12 ? count[c] - 11 : 1); j <= count[c]; j++) print lines[c, j]
      }
      for (i = 1; i <= m; i++) print summary[i]
    }' "$out" >&2
  log "e2e FAILED (exit $rc) after $((SECONDS - START))s; the cluster is left running for inspection (KUBECONFIG=$KUBECONFIG)"
fi
exit "$rc"
