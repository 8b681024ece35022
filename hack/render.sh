#!/usr/bin/env bash
# Renders a kustomize overlay of config/ with the project's two images set,
# to standard output: what `make build-installer` writes into dist/ and what
# `make deploy` applies.
#
#   KUSTOMIZE=bin/kustomize-v5.8.1 IMG=registry.example/retry/manager:v0.1.0 \
#     SIDECAR_IMG=registry.example/retry/retry-sidecar:v0.1.0 hack/render.sh config/selfsigned
#
# IMG sets the manager container (named controller in config/manager, and
# retry.dev/manager once config/local has named it); SIDECAR_IMG sets the
# manager's SIDECAR_IMAGE, which its --sidecar-image reads: kustomize's images
# list rewrites both (config/manager/kustomizeconfig.yaml). Either may carry a
# digest (name:tag@sha256:… or name@sha256:…).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
overlay="${1:?usage: hack/render.sh config/<overlay>}"
IMG="${IMG:-retry.dev/manager:dev}"
SIDECAR_IMG="${SIDECAR_IMG:-retry.dev/retry-sidecar:dev}"
: "${KUSTOMIZE:?KUSTOMIZE must name the kustomize binary}"
[[ -f "$ROOT/$overlay/kustomization.yaml" ]] || { echo "render: no $overlay/kustomization.yaml" >&2; exit 1; }

mkdir -p "$ROOT/bin"
tmp="$(mktemp -d "$ROOT/bin/render.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf 'resources:\n- ../../%s\n' "$overlay" >"$tmp/kustomization.yaml"
(cd "$tmp" && "$KUSTOMIZE" edit set image "controller=$IMG" "retry.dev/manager=$IMG" "retry.dev/retry-sidecar=$SIDECAR_IMG")
"$KUSTOMIZE" build "$tmp"
