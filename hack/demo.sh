#!/usr/bin/env bash
# make demo: the whole product on a real cluster, from a fresh clone.
#
#  1. builds the images without Docker (hack/build-images.sh);
#  2. starts the local single-node cluster (hack/local-cluster.sh up: on the first
#     run it builds Kubernetes from source, ~15-20 min on 2 cores) — or, when
#     KUBECONFIG is set, uses that cluster (the retry.dev/*:dev images must be on
#     its nodes already, e.g. `hack/kind.sh up`);
#  3. deploys the operator (config/local: self-signed webhook certificates);
#  4. applies the sample policies (config/samples, namespace shop) and, in namespace
#     demo, a flaky upstream, a demo app (which gets the retry-sidecar injected)
#     and a RetryPolicy for the upstream (test/e2e/testdata);
#  5. makes one logical request that meets a 429 with Retry-After: 2, then a 503,
#     then succeeds, and prints its timeline as the upstream measured it, and its
#     trace as the demo's OTLP receiver (test/e2e/trace-receiver) printed it:
#     the manager runs with --tracing-otlp-endpoint pointing at that receiver;
#  6. shows `kubectl get rp -A` and how to tear down.
#
# Re-running is safe and quick: everything is applied again, pods restart only
# when their image changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
NS=demo
START=$SECONDS
step() { printf '\n\033[1m==> %s\033[0m  [%ds]\n' "$*" "$((SECONDS - START))"; }
info() { printf '    %s\n' "$*"; }
die() { printf '\n\033[31mdemo: ERROR: %s\033[0m\n' "$*" >&2; exit 1; }

LOCAL_KUBECONFIG="$ROOT/.local-cluster/kubeconfig"
if [[ -n "${KUBECONFIG:-}" && "$KUBECONFIG" != "$LOCAL_KUBECONFIG" ]]; then
  MODE=existing
else
  MODE=local
fi

step "building the images without Docker (hack/build-images.sh)"
hack/build-images.sh 2>&1 | sed -u "s/^/    /"

if [[ "$MODE" == local ]]; then
  [[ $EUID -eq 0 ]] || die "the local cluster runs containerd and kubelet: run as root (or set KUBECONFIG to a cluster of yours)"
  missing=0
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [[ -x "bin/k8s/$KUBE_VERSION/$b" ]] || missing=1
  done
  if ((missing)); then
    step "starting the local cluster; FIRST RUN: building Kubernetes $KUBE_VERSION from source through the Go module proxy"
    info "this takes ~15-20 min on 2 cores (kube-apiserver alone ~6 min); later runs reuse bin/k8s/ and start in ~15 s"
  else
    step "starting the local single-node cluster (hack/local-cluster.sh up; reused if running)"
  fi
  # Not piped: a pipe would wait for every process holding the script's stderr.
  hack/local-cluster.sh up
  export KUBECONFIG="$LOCAL_KUBECONFIG"
else
  step "using the cluster in KUBECONFIG=$KUBECONFIG (the retry.dev/*:dev images must be on its nodes)"
  # A kind cluster (context kind-<name>) gets the tarballs just built.
  ctx="$(kubectl config current-context 2>/dev/null || true)"
  if [[ "$ctx" == kind-* ]] && command -v "${KIND:-kind}" >/dev/null 2>&1; then
    info "kind cluster ${ctx#kind-}: loading the images (hack/kind.sh images)"
    KIND_CLUSTER="${ctx#kind-}" hack/kind.sh images
  fi
fi

KUBECTL="${KUBECTL:-}"
if [[ -z "$KUBECTL" ]]; then
  if [[ -x "bin/k8s/$KUBE_VERSION/kubectl" ]]; then KUBECTL="$ROOT/bin/k8s/$KUBE_VERSION/kubectl"; else KUBECTL=kubectl; fi
fi
k() { "$KUBECTL" "$@"; }
k version >/dev/null 2>&1 || die "the cluster in KUBECONFIG=$KUBECONFIG does not answer"

step "deploying the operator (config/local: CRD, RBAC, manager, webhooks with a self-signed certificate)"
n="$(k kustomize config/local | k apply --server-side --force-conflicts --field-manager=retry-demo -f - | wc -l)"
info "$n objects applied in namespace retry-operator-system and cluster-wide"
# A manager still running an older build of retry.dev/manager:dev is restarted.
want="$(tar -xOf bin/images/manager.tar manifest.json 2>/dev/null | sed -n 's/.*"Config":"\(sha256:\)\{0,1\}\([0-9a-f]\{64\}\).*/\2/p')"
running="$(k -n retry-operator-system get pods -l control-plane=controller-manager -o jsonpath='{.items[*].status.containerStatuses[*].imageID}')"
if [[ -n "$want" && -n "$running" && "$running" != *"$want"* ]]; then
  info "the manager runs an older image; restarting it"
  k -n retry-operator-system rollout restart deployment/retry-operator-controller-manager | sed -u "s/^/    /"
fi
k -n retry-operator-system rollout status deployment/retry-operator-controller-manager --timeout=180s | sed -u "s/^/    /"

step "namespace $NS: an OTLP receiver; the manager traces injected sidecars to it (--tracing-otlp-endpoint)"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
fill() { sed -e "s/\${NAMESPACE}/$NS/g" -e "s/\${UPSTREAM_IP}/${UPSTREAM_IP:-}/g" "test/e2e/testdata/$1"; }
receiver_existed="$(k -n "$NS" get deployment trace-receiver --ignore-not-found -o name | wc -l)"
fill trace-receiver.yaml | k apply -f - | sed -u "s/^/    /"
if ((receiver_existed == 1)); then
  # Same manifest, maybe a new image under the same tag: restart to run it.
  k -n "$NS" rollout restart deployment/trace-receiver >/dev/null
fi
TRACE_URL="http://$(k -n "$NS" get service trace-receiver -o jsonpath='{.spec.clusterIP}'):4318"
args="$(k -n retry-operator-system get deployment retry-operator-controller-manager -o jsonpath='{.spec.template.spec.containers[0].args}')"
if [[ "$args" != *"--tracing-otlp-endpoint=$TRACE_URL"* ]]; then
  k -n retry-operator-system patch deployment retry-operator-controller-manager --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"--tracing-otlp-endpoint=$TRACE_URL\"}]" | sed -u "s/^/    /"
fi
k -n retry-operator-system rollout status deployment/retry-operator-controller-manager --timeout=180s | sed -u "s/^/    /"
k -n "$NS" rollout status deployment/trace-receiver --timeout=120s | sed -u "s/^/    /"

step "namespace $NS with retry.dev/injection=enabled; the flaky upstream, the demo app and their RetryPolicy"
k label namespace "$NS" retry.dev/injection=enabled --overwrite >/dev/null
# Wait until the webhook injects (the manager is ready, its caBundle is in place).
for i in $(seq 120); do
  got="$(k -n "$NS" run webhook-probe --image=retry.dev/demo-app:dev --restart=Never --dry-run=server \
    -o jsonpath='{.spec.initContainers[*].name}' 2>/dev/null || true)"
  [[ "$got" == *retry-sidecar* ]] && break
  ((i < 120)) || die "the pod webhook does not inject after 60 s; see: kubectl -n retry-operator-system logs deploy/retry-operator-controller-manager"
  sleep 0.5
done
existed="$(k -n "$NS" get deployment demo-app flaky-upstream --ignore-not-found -o name | wc -l)"
fill upstream.yaml | k apply -f - | sed -u "s/^/    /"
UPSTREAM_IP="$(k -n "$NS" get service flaky-upstream -o jsonpath='{.spec.clusterIP}')"
fill app.yaml | k apply -f - | sed -u "s/^/    /"
fill policy.yaml | k apply -f - 2>&1 | sed -u "s/^/    /"
if ((existed == 2)); then
  # Same manifests, maybe new images under the same tag: restart to run them.
  k -n "$NS" rollout restart deployment/flaky-upstream deployment/demo-app >/dev/null
fi
k -n "$NS" rollout status deployment/flaky-upstream --timeout=120s | sed -u "s/^/    /"
k -n "$NS" rollout status deployment/demo-app --timeout=120s | sed -u "s/^/    /"
k -n "$NS" wait --for=condition=Programmed retrypolicy/flaky-upstream --timeout=60s | sed -u "s/^/    /"
# The live pod (a restarted Deployment's old pod may still be terminating).
pod="$(k -n "$NS" get pods -l app=demo-app -o go-template='{{range .items}}{{if not .metadata.deletionTimestamp}}{{.metadata.name}}{{"\n"}}{{end}}{{end}}' | head -1)"
info "pod $pod: init containers [$(k -n "$NS" get pod "$pod" -o jsonpath='{.spec.initContainers[*].name}')], containers [$(k -n "$NS" get pod "$pod" -o jsonpath='{.spec.containers[*].name}')]"

step "applying the sample policies (config/samples, namespace shop)"
k create namespace shop --dry-run=client -o yaml | k apply -f - >/dev/null
k apply -k config/samples 2>&1 | sed -u "s/^/    /"

step "one logical request through the sidecar: the upstream answers 429 (Retry-After: 2), then 503, then 200"
info "policy flaky-upstream: maxAttempts 4, honour Retry-After up to 10s (+ up to 500ms spread), backoff 200ms..2s full jitter, deadline 10s"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 30); do
  k get --raw "/api/v1/namespaces/$NS/services/demo-app:8080/proxy/healthz" >/dev/null 2>&1 && break
  sleep 0.5
done
k get --raw "/api/v1/namespaces/$NS/services/demo-app:8080/proxy/call?url=http://flaky-upstream.$NS.svc/sequence/429:2,503,200" >"$tmp/call.json" ||
  die "the demo app did not answer; see: kubectl -n $NS logs deploy/demo-app --all-containers"
sleep 0.3 # the sidecar's last log line
k -n "$NS" logs "$pod" -c retry-sidecar >"$tmp/sidecar.log" 2>/dev/null || true
go build -o bin/demo-timeline ./test/e2e/demo-timeline
echo
bin/demo-timeline -report "$tmp/call.json" -sidecar-log "$tmp/sidecar.log"

step "its trace, as the OTLP receiver printed it: one SERVER span, one CLIENT span per attempt, each wait an event"
info "(docs/observability.md#tracing; spans are exported within 5 s, the receiver prints a trace once its SERVER span is in and 1 s passed without a new span)"
for i in $(seq 40); do
  k -n "$NS" logs deploy/trace-receiver >"$tmp/traces.log" 2>/dev/null || true
  grep -q "retry.attempts=3" "$tmp/traces.log" && break
  sleep 0.5
done
# The last trace printed: from its "trace" line to the end.
awk '/^trace /{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$tmp/traces.log" | sed -u "s/^/    /"

step "the RetryPolicies (kubectl get rp -A)"
k get rp -A | sed -u "s/^/    /"

step "done in $((SECONDS - START))s"
info "try more:   kubectl get --raw '/api/v1/namespaces/$NS/services/demo-app:8080/proxy/call?url=http://flaky-upstream.$NS.svc/retry-after/120'"
info "            (paths: /retry-after/{s} /flaky /always-503 /sequence/429:2,503,200 /echo; add &method=POST&key=K)"
info "kubectl:    export KUBECONFIG=$KUBECONFIG; $KUBECTL -n $NS logs deploy/demo-app -c retry-sidecar"
info "traces:     $KUBECTL -n $NS logs deploy/trace-receiver"
if [[ "$MODE" == local ]]; then
  info "tear down:  make cluster-down   (stops the local cluster and removes everything it created)"
else
  info "tear down:  kubectl delete namespace $NS shop; make undeploy (or kubectl kustomize config/local | kubectl delete -f -)"
fi
