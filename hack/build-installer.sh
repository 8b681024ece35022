#!/usr/bin/env bash
# Writes the release artefacts under dist/ (`make build-installer`; `make test`
# fails when they are stale):
#
#   dist/install.yaml             config/default: webhook certificates from cert-manager
#   dist/install-selfsigned.yaml  config/selfsigned: no cert-manager, one rotated Secret
#   dist/chart/crds/, files/      the generated parts of the Helm chart: the CRD, the
#                                 webhook entries and every RBAC object of the two
#                                 renderings (hack/chartfiles), so chart and
#                                 manifests grant the same rights
#
# IMG and SIDECAR_IMG are the manager and sidecar images (hack/render.sh sets
# them). Environment: KUSTOMIZE (required), IMG, SIDECAR_IMG.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMG="${IMG:-retry.dev/manager:dev}"
SIDECAR_IMG="${SIDECAR_IMG:-retry.dev/retry-sidecar:dev}"
: "${KUSTOMIZE:?KUSTOMIZE must name the kustomize binary}"

render() { # overlay output
  {
    echo "# retry-operator, rendered from config/$1 by \`make build-installer\`; do not edit."
    echo "# Manager image: $IMG; sidecar image: $SIDECAR_IMG. docs/operations.md explains the install."
    IMG="$IMG" SIDECAR_IMG="$SIDECAR_IMG" KUSTOMIZE="$KUSTOMIZE" "$ROOT/hack/render.sh" "config/$1"
  } >"$ROOT/$2"
  echo "wrote $2"
}

mkdir -p "$ROOT/dist"
render default dist/install.yaml
render selfsigned dist/install-selfsigned.yaml

# The chart's generated parts: copied, never edited by hand.
chart="$ROOT/dist/chart"
mkdir -p "$chart/crds" "$chart/files"
cp "$ROOT"/config/crd/bases/*.yaml "$chart/crds/"
(cd "$ROOT" && go run ./hack/chartfiles -cert-manager dist/install.yaml \
  -self-signed dist/install-selfsigned.yaml -output dist/chart/files/rbac.yaml)
{ echo "# Generated from config/webhook/manifests.yaml by \`make build-installer\`; do not edit."
  cat "$ROOT/config/webhook/manifests.yaml"; } >"$chart/files/webhooks.yaml"
echo "wrote dist/chart/crds and dist/chart/files"
