#!/usr/bin/env bash
# Builds the project's container images without Docker: each program is built
# static (CGO_ENABLED=0) and packed by hack/images into a docker-archive tarball
# in bin/images/, ready for `ctr -n k8s.io images import` (hack/local-cluster.sh
# does that) or `kind load image-archive` (hack/kind.sh does that).
#
#   hack/build-images.sh                    # every image whose program exists
#   IMAGES="pause retry-sidecar" hack/build-images.sh
#   IMG=registry.example/retry/manager:v0.1.0 \
#     SIDECAR_IMG=registry.example/retry/retry-sidecar:v0.1.0 hack/build-images.sh
#
# IMG and SIDECAR_IMG name the manager and sidecar images (the Makefile's
# variables; hack/pushimages pushes the tarballs under any name). The test
# images (flaky-upstream, demo-app, trace-receiver, pause) keep their
# retry.dev/… names: only the e2e suite and the demo run them.
#
# A program directory that does not exist yet is skipped with a message; one that
# exists but does not compile fails the script.
#
# One image is not a Go program: retry.dev/redis:dev, the store of the e2e suite's
# SharedQuota case, is Debian's /usr/bin/redis-server with the dynamic loader and
# the shared libraries `ldd` lists, at the paths ldd gives (docs/development.md).
# Without redis-server installed it is skipped with a message (an error when
# RETRY_REQUIRE_TOOLS is set, as .ci/run does).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${IMAGES_DIR:-$ROOT/bin/images}"
IMG="${IMG:-retry.dev/manager:dev}"
SIDECAR_IMG="${SIDECAR_IMG:-retry.dev/retry-sidecar:dev}"
PAUSE_IMAGE="${PAUSE_IMAGE:-retry.dev/pause:3.10}"
GOARCH="${GOARCH:-$(go env GOARCH)}"
export GOARCH

# name | package | image reference
TABLE=(
  "manager|./cmd/manager|$IMG"
  "retry-sidecar|./cmd/retry-sidecar|$SIDECAR_IMG"
  "flaky-upstream|./test/e2e/flaky-upstream|retry.dev/flaky-upstream:dev"
  "demo-app|./test/e2e/demo-app|retry.dev/demo-app:dev"
  "trace-receiver|./test/e2e/trace-receiver|retry.dev/trace-receiver:dev"
  "pause|./hack/pause|$PAUSE_IMAGE"
)

START=$SECONDS
log() { echo "build-images: [$((SECONDS - START))s] $*" >&2; }

wanted() {
  [[ -z "${IMAGES:-}" ]] && return 0
  local w
  for w in $IMAGES; do [[ "$w" == "$1" ]] && return 0; done
  return 1
}

revision="$(git -C "$ROOT" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
# Reproducible by default: the same sources give the same image digests.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}"

mkdir -p "$OUT/.build"
log "building the image tool (hack/images)"
(cd "$ROOT" && go build -o "$OUT/.build/images" ./hack/images)

built=0 skipped=()
for row in "${TABLE[@]}"; do
  IFS='|' read -r name pkg ref <<<"$row"
  wanted "$name" || continue
  if [[ ! -d "$ROOT/${pkg#./}" ]]; then
    log "skipping $name: $pkg does not exist yet"
    skipped+=("$name")
    continue
  fi
  extra=()
  if [[ "$name" == retry-sidecar ]]; then
    # The sidecar originates TLS (docs/tls.md): it ships the system CA bundle.
    ca="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
    [[ -r "$ca" ]] || { log "no CA bundle at $ca (install Debian's ca-certificates, or set CA_BUNDLE)"; exit 1; }
    extra=(-ca-bundle "$ca")
  fi
  log "building $name ($pkg, linux/$GOARCH, static)"
  (cd "$ROOT" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o "$OUT/.build/$name" "$pkg")
  "$OUT/.build/images" \
    -binary "$OUT/.build/$name" -name "$name" -image "$ref" -output "$OUT/$name.tar" "${extra[@]}" \
    -label "org.opencontainers.image.title=$name" \
    -label "org.opencontainers.image.source=https://github.com/retrydev/retry-operator" \
    -label "org.opencontainers.image.version=${ref##*:}" \
    -label "org.opencontainers.image.revision=$revision" \
    -label "org.opencontainers.image.licenses=Apache-2.0" \
    -label "org.opencontainers.image.ref.name=$ref"
  built=$((built + 1))
done

# build_redis packs Debian's redis-server, its loader and libraries.
build_redis() {
  local bin=/usr/bin/redis-server version files=() lib
  if [[ ! -x "$bin" ]]; then
    if [[ -n "${RETRY_REQUIRE_TOOLS:-}" ]]; then # .ci/run: the e2e SharedQuota case needs it
      log "no $bin (apt-get install redis-server) and RETRY_REQUIRE_TOOLS is set"
      exit 1
    fi
    log "skipping redis: no $bin (apt-get install redis-server)"
    skipped+=(redis)
    return
  fi
  # ldd: "libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x…)" and the
  # loader "/lib64/ld-linux-x86-64.so.2 (0x…)"; linux-vdso has no file.
  while read -r lib; do
    files+=(-file "$lib")
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
  version="$(dpkg-query -W -f='${Version}' redis-server 2>/dev/null || echo unknown)"
  log "packing redis ($bin, Debian redis-server $version, $((${#files[@]} / 2)) files from ldd)"
  "$OUT/.build/images" \
    -binary "$bin" -name redis-server -image retry.dev/redis:dev -output "$OUT/redis.tar" "${files[@]}" \
    -label "org.opencontainers.image.title=redis" \
    -label "org.opencontainers.image.description=Debian's redis-server $version, for the e2e suite" \
    -label "org.opencontainers.image.version=$version" \
    -label "org.opencontainers.image.ref.name=retry.dev/redis:dev"
  built=$((built + 1))
}
if wanted redis; then
  build_redis
fi

log "done: $built image(s) in ${OUT#"$ROOT"/}/${skipped[*]:+ (skipped: ${skipped[*]})}"
