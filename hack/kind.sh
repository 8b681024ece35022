#!/usr/bin/env bash
# The user path for machines with Docker: a kind cluster loaded with the same
# image tarballs the local cluster uses (bin/images/*.tar from hack/build-images.sh),
# so `make test-e2e` runs against it unchanged (pods use the retry.dev/*:dev
# images with imagePullPolicy IfNotPresent/Never; nothing is pushed anywhere).
#
#   hack/kind.sh up           # create the cluster if missing, load every bin/images/*.tar
#   hack/kind.sh images       # (re)load the tarballs into the existing cluster
#   hack/kind.sh kubeconfig   # print the kubeconfig path written by `up`
#   hack/kind.sh down         # delete the cluster
#
# Environment: KIND (kind binary, default: kind on PATH), KIND_CLUSTER
# (default retry-operator-e2e), KIND_NODE_IMAGE (optional node image, e.g. kindest/node:v1.35.0).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIND="${KIND:-kind}"
CLUSTER="${KIND_CLUSTER:-retry-operator-e2e}"
IMAGES_DIR="${IMAGES_DIR:-$ROOT/bin/images}"
KUBECONFIG_OUT="$ROOT/bin/kind-$CLUSTER.kubeconfig"

START=$SECONDS
log() { printf 'kind: [%3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_kind() { command -v "$KIND" >/dev/null 2>&1 || die "kind not found (set KIND=/path/to/kind); see https://kind.sigs.k8s.io"; }
exists() { need_kind; "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; }

load_images() {
  local tar n=0
  shopt -s nullglob
  for tar in "$IMAGES_DIR"/*.tar; do
    # The pause image is only for the local cluster; kind ships its own.
    [[ "$(basename "$tar")" == pause.tar ]] && continue
    log "loading ${tar#"$ROOT"/}"
    "$KIND" load image-archive "$tar" --name "$CLUSTER"
    n=$((n + 1))
  done
  ((n > 0)) || die "no image tarballs in ${IMAGES_DIR#"$ROOT"/}; run: make build-images"
}

case "${1:-}" in
  up)
    if exists; then
      log "kind cluster $CLUSTER exists"
    else
      log "creating kind cluster $CLUSTER"
      "$KIND" create cluster --name "$CLUSTER" --wait 120s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
    fi
    mkdir -p "$(dirname "$KUBECONFIG_OUT")"
    "$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_OUT"
    load_images
    log "ready: export KUBECONFIG=$KUBECONFIG_OUT"
    ;;
  images) exists || die "no kind cluster $CLUSTER; run: hack/kind.sh up"; load_images ;;
  kubeconfig) echo "$KUBECONFIG_OUT" ;;
  down)
    if exists; then "$KIND" delete cluster --name "$CLUSTER"; else log "no kind cluster $CLUSTER; nothing to do"; fi
    rm -f "$KUBECONFIG_OUT"
    ;;
  *) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2 ;;
esac
