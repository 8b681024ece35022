#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests and the local cluster need, from source,
# through the Go module proxy. Nothing is downloaded from anywhere else.
#
#   hack/kube-binaries.sh            # kube-apiserver, kubectl, etcd  (envtest)
#   hack/kube-binaries.sh --node     # + kubelet, kube-controller-manager, kube-scheduler, kube-proxy
#   hack/kube-binaries.sh --kubectl  # kubectl alone (make install/deploy without one on PATH)
#
# Output: bin/k8s/<version>/ (git-ignored), reused when present. Prints the directory
# on the last line of stdout so callers can do: ASSETS=$(hack/kube-binaries.sh | tail -1).
# An existing KUBEBUILDER_ASSETS that holds the three envtest binaries wins.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${KUBE_BIN_DIR:-$ROOT/bin/k8s/$KUBE_VERSION}"
NODE=false KUBECTL_ONLY=false
case "${1:-}" in
  --node) NODE=true ;;
  --kubectl) KUBECTL_ONLY=true ;;
esac

log() { echo "kube-binaries: $*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && "$NODE" == false && "$KUBECTL_ONLY" == false ]] &&
   [[ -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" && -x "$KUBEBUILDER_ASSETS/kubectl" ]]; then
  log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

mkdir -p "$OUT"
# v0.X.Y for the staging modules that belong to Kubernetes vX.Y.Z.
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client cri-streaming csi-translation-lib
  dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
  kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver streaming)

wanted=(kube-apiserver kubectl)
$NODE && wanted+=(kubelet kube-controller-manager kube-scheduler kube-proxy)
$KUBECTL_ONLY && wanted=(kubectl)
missing=()
for b in "${wanted[@]}"; do [[ -x "$OUT/$b" ]] || missing+=("$b"); done

# A throwaway module outside the project's module, so the project's go.mod never
# carries k8s.io/kubernetes (which is not meant to be imported).
WORK="$ROOT/bin/k8s/.build-$KUBE_VERSION"
if ((${#missing[@]})); then
  mkdir -p "$WORK"
  if [[ ! -f "$WORK/go.sum" ]] || ! grep -q "k8s.io/kubernetes $KUBE_VERSION" "$WORK/go.mod" 2>/dev/null || [[ "$NODE" == true && ! -f "$WORK/.node" ]]; then
    log "preparing build module for Kubernetes $KUBE_VERSION in $WORK"
    {
      echo "module kubebuild"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      echo "replace ("
      for m in "${STAGING[@]}"; do echo "	k8s.io/$m => k8s.io/$m $STAGING_VERSION"; done
      echo ")"
    } >"$WORK/go.mod"
    {
      echo "//go:build tools"
      echo
      echo "package tools"
      echo
      echo "import ("
      echo "	_ \"k8s.io/kubernetes/cmd/kube-apiserver\""
      echo "	_ \"k8s.io/kubernetes/cmd/kubectl\""
      echo "	_ \"k8s.io/kubernetes/cmd/kubelet\""
      echo "	_ \"k8s.io/kubernetes/cmd/kube-controller-manager\""
      echo "	_ \"k8s.io/kubernetes/cmd/kube-scheduler\""
      echo "	_ \"k8s.io/kubernetes/cmd/kube-proxy\""
      echo ")"
    } >"$WORK/tools.go"
    start=$SECONDS
    (cd "$WORK" && GOFLAGS=-mod=mod go mod tidy >&2)
    touch "$WORK/.node"
    log "module ready in $((SECONDS - start))s"
  fi
  minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitTreeState=clean"
  for b in "${missing[@]}"; do
    log "building $b $KUBE_VERSION from source (first build takes minutes: kube-apiserver ~6 min cold on 2 cores)"
    start=$SECONDS
    # Print a heartbeat so a newcomer can see it is working, not hanging.
    ( while sleep 30 >/dev/null 2>&1; do log "  ... still building $b ($((SECONDS - start))s)"; done ) &
    hb=$!
    if ! (cd "$WORK" && CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"); then
      kill "$hb" 2>/dev/null || true
      log "FAILED to build $b"; exit 1
    fi
    kill "$hb" 2>/dev/null || true
    mv "$OUT/$b.tmp" "$OUT/$b"
    log "built $b in $((SECONDS - start))s"
  done
fi

if [[ "$KUBECTL_ONLY" == false && ! -x "$OUT/etcd" ]]; then
  EWORK="$ROOT/bin/k8s/.build-etcd-$ETCD_VERSION"
  mkdir -p "$EWORK"
  log "building etcd $ETCD_VERSION from source (~1-2 min cold)"
  start=$SECONDS
  if [[ ! -f "$EWORK/go.sum" ]]; then
    printf 'module etcdbuild\n\ngo 1.26\n' >"$EWORK/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$EWORK/tools.go"
    (cd "$EWORK" && GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 && GOFLAGS=-mod=mod go mod tidy >&2)
  fi
  ( while sleep 30 >/dev/null 2>&1; do log "  ... still building etcd ($((SECONDS - start))s)"; done ) &
  hb=$!
  if ! (cd "$EWORK" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3); then
    kill "$hb" 2>/dev/null || true
    log "FAILED to build etcd"; exit 1
  fi
  kill "$hb" 2>/dev/null || true
  mv "$OUT/etcd.tmp" "$OUT/etcd"
  log "built etcd in $((SECONDS - start))s"
fi

log "binaries ready in $OUT"
echo "$OUT"
