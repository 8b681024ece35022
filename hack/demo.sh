#!/usr/bin/env bash
# make demo: a real control plane built from source, the RetryPolicy API, the
# sample policies, and what the API server does with a bad one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$SECONDS
say() { printf '\n\033[1m==> %s\033[0m (%ss)\n' "$*" "$((SECONDS - start))"; }

say "building Kubernetes binaries from source if missing (first run: 10-15 min on 2 cores)"
ASSETS="$(hack/kube-binaries.sh | tail -1)"
KUBECTL="$ASSETS/kubectl"
mkdir -p .local-cluster
KC="$ROOT/.local-cluster/controlplane.kubeconfig"
rm -f "$KC"

say "starting kube-apiserver + etcd with the RetryPolicy CRD"
go build -o bin/controlplane ./hack/controlplane
bin/controlplane --assets "$ASSETS" --write-kubeconfig "$KC" >.local-cluster/controlplane.log 2>&1 &
CP=$!
trap 'kill $CP 2>/dev/null; wait $CP 2>/dev/null || true' EXIT
for _ in $(seq 120); do [[ -s "$KC" ]] && break; kill -0 $CP 2>/dev/null || { cat .local-cluster/controlplane.log; exit 1; }; sleep 0.5; done
k() { "$KUBECTL" --kubeconfig "$KC" "$@"; }

say "applying the sample policies (config/samples)"
k create namespace shop
k apply --server-side -f config/samples/partner-api-rate-limited.yaml -f config/samples/internal-idempotent-writes.yaml -f config/samples/catalogue-read-only.yaml
k get rp -n shop

say "the API server filled in every default (catalogue)"
k get rp catalogue -n shop -o jsonpath='{.spec.upstreams[0]}' | python3 -m json.tool

say "a policy that breaks the rules is rejected before it is stored"
cat <<'YAML' | k apply -f - 2>&1 | sed 's/^/    /' || true
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: broken, namespace: shop}
spec:
  upstreams:
  - name: orders
    hosts: [orders.shop.svc]
    maxAttempts: 12
    deadline: 5s
    perTryTimeout: 5s
    backoff: {base: 2s, max: 1s}
    replayableMethods: [GET, POST]
YAML

say "done; the control plane stops now"
