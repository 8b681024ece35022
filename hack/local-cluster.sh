#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, from binaries built from source
# (hack/kube-binaries.sh --node) plus Debian's containerd, runc and CNI plugins.
# No Docker, no downloads: images come from bin/images/*.tar (hack/build-images.sh),
# imported into containerd, and from a local registry (Debian's docker-registry,
# i.e. CNCF Distribution, on 127.0.0.1:LOCAL_CLUSTER_REGISTRY_PORT) that containerd
# pulls from over plain HTTP, as a user's cluster pulls from theirs.
# Why each setting is as it is: docs/development.md.
#
#   hack/local-cluster.sh up          # start (or confirm running), import images, wait for Ready
#   hack/local-cluster.sh images      # (re)import bin/images/*.tar into the running cluster
#   hack/local-cluster.sh status      # components, PIDs, logs, node condition; exit 1 unless all run
#   hack/local-cluster.sh kubeconfig  # print the kubeconfig path: export KUBECONFIG=$(... kubeconfig)
#   hack/local-cluster.sh registry    # print the registry's address (127.0.0.1:5001): push IMG=$(...)/…
#   hack/local-cluster.sh ctr ARGS... # ctr on the cluster's containerd, namespace k8s.io (images ls, ...)
#   hack/local-cluster.sh down        # stop exactly what `up` started, remove its traces; no-op if none
#   hack/local-cluster.sh restart-apiserver          # SIGKILL kube-apiserver, start it again, wait until ready
#   hack/local-cluster.sh stop-apiserver | start-apiserver   # the same in two steps
#   hack/local-cluster.sh kill-container NS POD NAME # SIGKILL a pod's container through containerd (a crash)
#   hack/local-cluster.sh cut-network NS POD SECONDS # drop every packet of the pod but loopback for SECONDS
#
# The last four are faults for the e2e and chaos suites (docs/operations.md, "What survives a fault").
#
# State (PKI, etcd data, containerd root, kubelet root, PIDs, logs) lives in the
# git-ignored .local-cluster/ (override: LOCAL_CLUSTER_DIR). `down` keeps the last
# logs in bin/local-cluster-logs/. Needs root (kubelet, containerd, iptables).
#
# Tunables (environment): LOCAL_CLUSTER_NODE_IP (default: the host's primary IPv4),
# LOCAL_CLUSTER_NODE_NAME (retry-local), LOCAL_CLUSTER_POD_CIDR (10.88.0.0/16),
# LOCAL_CLUSTER_SERVICE_CIDR (10.96.0.0/16), LOCAL_CLUSTER_API_PORT (6443),
# LOCAL_CLUSTER_REGISTRY_PORT (5001), LOCAL_CLUSTER_NO_IMPORT (tarball names without .tar that
# up/images leave out, e.g. "manager retry-sidecar" when those come from the registry),
# LOCAL_CLUSTER_READY_TIMEOUT (seconds, 180), KUBE_VERSION (v1.37.2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/hack/local-cluster.sh"
STATE="${LOCAL_CLUSTER_DIR:-$ROOT/.local-cluster}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
K8S_BIN="$ROOT/bin/k8s/$KUBE_VERSION"
IMAGES_DIR="${IMAGES_DIR:-$ROOT/bin/images}"
LOGS_KEPT="$ROOT/bin/local-cluster-logs"

NODE_NAME="${LOCAL_CLUSTER_NODE_NAME:-retry-local}"
POD_CIDR="${LOCAL_CLUSTER_POD_CIDR:-10.88.0.0/16}"
SERVICE_CIDR="${LOCAL_CLUSTER_SERVICE_CIDR:-10.96.0.0/16}"
API_PORT="${LOCAL_CLUSTER_API_PORT:-6443}"
REGISTRY="127.0.0.1:${LOCAL_CLUSTER_REGISTRY_PORT:-5001}"
READY_TIMEOUT="${LOCAL_CLUSTER_READY_TIMEOUT:-180}"
PAUSE_IMAGE="retry.dev/pause:3.10"
BRIDGE="retrybr0"            # this cluster's pod bridge; deleted by `down`
CNI_NETWORK="retry-local"    # CNI network name (iptables comments, CNI cache files)
ETCD_PORT=2379
ETCD_PEER_PORT=2380

PKI="$STATE/pki"
LOGS="$STATE/logs"
PIDS="$STATE/pids"
CONTAINERD_SOCK="$STATE/run/containerd.sock"
KUBECONFIG_OUT="$STATE/kubeconfig"

# Start order; `down` stops in reverse.
COMPONENTS=(etcd registry containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
# Ports the cluster listens on; `up` refuses to start when one is taken.
PORTS=("$API_PORT" "${REGISTRY##*:}" "$ETCD_PORT" "$ETCD_PEER_PORT" 10248 10249 10250 10256 10257 10259)
# Host sysctls kubelet, kube-proxy or the CNI bridge may change; `down` restores them.
SYSCTLS=(net/ipv4/ip_forward net/ipv4/conf/all/route_localnet net/bridge/bridge-nf-call-iptables
  vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes
  net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait)
# What `up` creates inside the state dir; `down` removes exactly these.
OWNED=(pki logs pids run config etcd registry containerd kubelet pod-logs cni kubeconfig sysctl.saved hostdirs.preexisting)
# Host paths that kubelet/containerd/CNI create outside the state dir; `down`
# removes them only if they did not exist before `up`.
HOST_DIRS=(/run/containerd /var/lib/cni /var/log/containers /var/log/pods /var/lib/kubelet)

START=$SECONDS
log() { printf 'local-cluster: [%3ds] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
rel() { echo "${1#"$ROOT"/}"; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF" >&2
  exit 2
}

# ---------------------------------------------------------------------------
# Processes: every component is recorded as "<pid> <starttime> <exe>" so that
# `down` never signals a recycled PID or a process it did not start.

proc_starttime() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"        # fields after "(comm) ", comm may contain spaces
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}

proc_exe() {
  local exe
  exe="$(readlink "/proc/$1/exe" 2>/dev/null)" || return 1
  echo "${exe% (deleted)}"
}

# alive NAME: the recorded process of NAME is running.
alive() {
  local f="$PIDS/$1.pid" pid st exe
  [[ -f "$f" ]] || return 1
  read -r pid st exe <"$f" || return 1
  [[ -n "$pid" && "$(proc_starttime "$pid" 2>/dev/null)" == "$st" && "$(proc_exe "$pid" 2>/dev/null)" == "$exe" ]]
}

recorded_pid() { local pid _; read -r pid _ <"$PIDS/$1.pid"; echo "$pid"; }

# launch NAME BINARY ARGS...: start in its own session (immune to the caller's
# Ctrl-C and hangups), stdout+stderr to its log, record the real PID.
launch() {
  local name="$1" bin="$2" pid exe i
  shift 2
  bin="$(readlink -f "$bin")"
  # Appended to: a restarted component (restart-apiserver) keeps its earlier log.
  echo "----- $(date -u +%FT%TZ) local-cluster.sh starts $name" >>"$LOGS/$name.log"
  # fd 9 is this script's lock: the component must not inherit (and hold) it.
  setsid "$bin" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9<&- &
  pid=$!
  # $! is the component itself: setsid execs in place (no job control here).
  for ((i = 0; i < 50; i++)); do
    exe="$(proc_exe "$pid" 2>/dev/null || true)"
    [[ "$exe" == "$bin" ]] && break
    [[ -z "$exe" ]] && failed "$name" "exited immediately"
    sleep 0.02
  done
  [[ "$exe" == "$bin" ]] || die "$name: PID $pid runs '$exe', not $bin"
  echo "$pid $(proc_starttime "$pid") $bin" >"$PIDS/$name.pid"
  log "started $name (pid $pid, log $(rel "$LOGS/$name.log"))"
}

# failed NAME WHY: name the component and its log, show the log's tail, exit.
failed() {
  local logf="$LOGS/$1.log"
  log "ERROR: $1 $2 — read its log: $logf"
  if [[ -s "$logf" ]]; then
    echo "----- last lines of $logf -----" >&2
    tail -n 25 "$logf" >&2
    echo "-----" >&2
  fi
  log "the other components are left running for inspection; clean up with: hack/local-cluster.sh down"
  exit 1
}

# wait_until NAME WHAT TIMEOUT CMD...: poll CMD until it succeeds; fail naming
# NAME's log if NAME dies or TIMEOUT seconds pass. Progress every 5 s.
wait_until() {
  local name="$1" what="$2" timeout="$3" t0=$SECONDS next=5
  shift 3
  until "$@" >/dev/null 2>&1; do
    alive "$name" || failed "$name" "exited while waiting for $what"
    ((SECONDS - t0 < timeout)) || failed "$name" "did not reach '$what' within ${timeout}s"
    if ((SECONDS - t0 >= next)); then
      log "  ... waiting for $what ($((SECONDS - t0))s)"
      next=$((next + 5))
    fi
    sleep 0.3
  done
}

# stop NAME [KILL]: SIGTERM the recorded process, SIGKILL after 20 s; with
# KILL, SIGKILL at once (a crash).
stop() {
  local name="$1" sig="${2:-TERM}" pid i
  [[ -f "$PIDS/$name.pid" ]] || return 0
  if alive "$name"; then
    pid="$(recorded_pid "$name")"
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do alive "$name" || break; sleep 0.2; done
    if alive "$name"; then
      log "  $name (pid $pid) ignored SIGTERM for 20s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 25; i++)); do alive "$name" || break; sleep 0.2; done
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$PIDS/$name.pid"
}

# ---------------------------------------------------------------------------
# Host facts

detect_node_ip() {
  if [[ -n "${LOCAL_CLUSTER_NODE_IP:-}" ]]; then echo "$LOCAL_CLUSTER_NODE_IP"; return; fi
  local dev ip=""
  # The address of the interface holding the default route: no packet is sent.
  dev="$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')"
  if [[ -n "$dev" ]]; then
    ip="$(ip -4 -o addr show dev "$dev" scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')"
  fi
  [[ -n "$ip" ]] || ip="$(hostname -I 2>/dev/null | awk '{print $1}')"
  [[ -n "$ip" ]] || die "cannot detect the host's primary IPv4 address; set LOCAL_CLUSTER_NODE_IP"
  echo "$ip"
}

# first_service_ip 10.96.0.0/16 -> 10.96.0.1 (the kubernetes Service).
first_service_ip() {
  local net="${1%/*}" a b c d
  IFS=. read -r a b c d <<<"$net"
  echo "$a.$b.$c.$((d + 1))"
}

ensure_packages() {
  local need=() cmd pkg pair
  for pair in containerd:containerd runc:runc iptables:iptables conntrack:conntrack socat:socat \
    ethtool:ethtool ip:iproute2 openssl:openssl curl:curl docker-registry:docker-registry; do
    cmd="${pair%%:*}" pkg="${pair##*:}"
    command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/portmap && -x /usr/lib/cni/loopback ]] ||
    need+=(containernetworking-plugins)
  ((${#need[@]})) || return 0
  log "installing Debian packages: ${need[*]} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$LOGS/apt.log" 2>&1 || die "apt-get update failed; see $LOGS/apt.log"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$LOGS/apt.log" 2>&1 ||
    die "apt-get install ${need[*]} failed; see $LOGS/apt.log"
}

ensure_binaries() {
  local b missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [[ -x "$K8S_BIN/$b" ]] || missing+=("$b")
  done
  ((${#missing[@]})) || return 0
  log "Kubernetes $KUBE_VERSION binaries missing (${missing[*]}): building them from source."
  log "  first build on 2 cores takes ~15 min (kube-apiserver alone ~6 min); later runs reuse bin/k8s/"
  mkdir -p "$ROOT/bin/k8s"
  # One build at a time, also across concurrent callers of this script.
  flock "$ROOT/bin/k8s/.build.lock" "$ROOT/hack/kube-binaries.sh" --node >/dev/null ||
    die "building Kubernetes binaries failed (hack/kube-binaries.sh --node); its output is above"
  for b in "${missing[@]}"; do [[ -x "$K8S_BIN/$b" ]] || die "hack/kube-binaries.sh did not produce $K8S_BIN/$b"; done
  log "Kubernetes binaries ready in $(rel "$K8S_BIN")"
}

ensure_pause_image() {
  [[ -f "$IMAGES_DIR/pause.tar" ]] && return 0
  log "building the sandbox image $PAUSE_IMAGE (hack/build-images.sh)"
  IMAGES=pause "$ROOT/hack/build-images.sh"
}

check_ports() {
  local p busy
  for p in "${PORTS[@]}"; do
    busy="$(ss -Htlnp "sport = :$p" 2>/dev/null || true)"
    [[ -z "$busy" ]] || die "port $p is already in use, the cluster needs it: $busy"
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "interface $BRIDGE already exists (a cluster from another state dir?); remove it or run its down"
  fi
}

save_host_state() {
  local key dir
  : >"$STATE/sysctl.saved"
  for key in "${SYSCTLS[@]}"; do
    [[ -r "/proc/sys/$key" ]] && echo "$key $(cat "/proc/sys/$key")" >>"$STATE/sysctl.saved"
  done
  : >"$STATE/hostdirs.preexisting"
  for dir in "${HOST_DIRS[@]}"; do
    [[ -e "$dir" ]] && echo "$dir" >>"$STATE/hostdirs.preexisting"
  done
  return 0
}

# ---------------------------------------------------------------------------
# PKI (openssl, ECDSA P-256) and kubeconfigs

gen_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# issue NAME SUBJECT EXTENSIONS...: a leaf certificate signed by the cluster CA.
issue() {
  local name="$1" subj="$2"
  shift 2
  gen_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "$@" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

generate_pki() {
  local node_ip="$1" svc_ip
  svc_ip="$(first_service_ip "$SERVICE_CIDR")"
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  gen_key "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=retry-local-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
  issue apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth" \
    "subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$svc_ip,IP:$node_ip"
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
  issue admin "/O=system:masters/CN=retry-local-admin" "extendedKeyUsage=clientAuth"
  issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$node_ip"
  gen_key "$PKI/sa.key"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI"/*.key
}

# write_kubeconfig FILE CERT_NAME USER
write_kubeconfig() {
  local file="$1" cert="$2" user="$3"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: retry-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: retry-local
  context:
    cluster: retry-local
    user: $user
current-context: retry-local
EOF
  chmod 600 "$file"
}

# ---------------------------------------------------------------------------
# Configuration files

write_configs() {
  local node_ip="$1"
  mkdir -p "$STATE/config" "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/containerd/opt"
  cat >"$STATE/config/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # network namespaces under the state dir, not /var/run/netns
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
  # hosts.toml per registry: the local one answers plain HTTP (write_registry_config).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/config/certs.d"
EOF
  write_registry_config
  cat >"$STATE/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$STATE/config/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
podLogsDir: $STATE/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
  imagefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

# launch_apiserver NODE_IP: start kube-apiserver on the cluster's PKI and etcd;
# `up` and `start-apiserver` share it, so a restarted one is the same server.
launch_apiserver() {
  local node_ip="$1"
  launch kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --secure-port "$API_PORT" --advertise-address "$node_ip" \
    --anonymous-auth=false --allow-privileged=true --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --cert-dir "$PKI/apiserver-generated" --profiling=false
}

# ---------------------------------------------------------------------------
# Host cleanup (recipe §5). Everything here is scoped to this cluster: its state
# dir, its bridge, its CNI network, the KUBE-*/CNI-* chains, the /kubepods cgroups.

kubectl_() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" --request-timeout=10s "$@"; }
ctr_() { ctr -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }

stop_containers() {
  local ids id
  ids="$(timeout 20 ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null || true)"
  [[ -z "$ids" ]] && return 0
  log "killing $(wc -w <<<"$ids") pod container(s) through containerd"
  for id in $ids; do timeout 20 ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true; done
  for id in $ids; do timeout 20 ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true; done
}

# Processes left in this cluster's pod cgroups, and the runc shims that belong to
# this cluster's containerd (they carry its socket address on their command line).
kill_leftovers() {
  local f pid n=0 cmd
  for f in /sys/fs/cgroup/*/kubepods; do
    [[ -d "$f" ]] || continue
    while read -r pid; do
      [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
  done
  for f in /proc/[0-9]*/cmdline; do
    cmd="$({ tr '\0' ' ' <"$f"; } 2>/dev/null || true)"
    if [[ "$cmd" == *containerd-shim* && "$cmd" == *" -address $CONTAINERD_SOCK "* ]]; then
      pid="${f#/proc/}" pid="${pid%/cmdline}"
      kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    fi
  done
  ((n == 0)) || { log "killed $n leftover pod process(es)/shim(s)"; sleep 0.5; }
}

unmount_all() {
  local prefixes=("$STATE/") mp n=0 i
  grep -qx /run/containerd "$STATE/hostdirs.preexisting" 2>/dev/null || prefixes+=(/run/containerd/)
  for ((i = 0; i < 3; i++)); do
    local found=0
    while read -r mp; do
      for p in "${prefixes[@]}"; do
        if [[ "$mp/" == "$p"* ]]; then
          umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
          n=$((n + 1)) found=1
        fi
      done
    done < <(awk '{print $5}' /proc/self/mountinfo | sort -r)
    ((found)) || break
  done
  ((n == 0)) || log "unmounted $n mount(s) under $(rel "$STATE") and /run/containerd"
}

clean_iptables() {
  local save="$1" restore="$2" table dump chains n=0
  command -v "$save" >/dev/null 2>&1 || return 0
  for table in raw mangle nat filter; do
    dump="$("$save" -t "$table" 2>/dev/null)" || continue
    mapfile -t chains < <(grep -oE '^:(KUBE-|CNI-)[^ ]+' <<<"$dump" | cut -c2-)
    ((${#chains[@]})) || continue
    {
      echo "*$table"
      grep -E '^-A ' <<<"$dump" | grep -vE '^-A (KUBE-|CNI-)' | grep -E -- ' -[jg] (KUBE-|CNI-)' | sed 's/^-A /-D /' || true
      printf -- '-F %s\n' "${chains[@]}"
      printf -- '-X %s\n' "${chains[@]}"
      echo COMMIT
    } | "$restore" --noflush || log "WARNING: $restore could not remove every chain from table $table"
    n=$((n + ${#chains[@]}))
  done
  ((n == 0)) || log "removed $n KUBE-*/CNI-* chain(s) ($save)"
}

clean_network() {
  local veth
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for veth in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link del "$veth" 2>/dev/null || true
    done
    ip link del "$BRIDGE" && log "deleted bridge $BRIDGE"
  fi
  rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
  # Connection-tracking entries of this cluster's pod and service addresses.
  if command -v conntrack >/dev/null 2>&1; then
    conntrack -D -s "$POD_CIDR" >/dev/null 2>&1 || true
    conntrack -D -d "$POD_CIDR" >/dev/null 2>&1 || true
    conntrack -D -d "$SERVICE_CIDR" >/dev/null 2>&1 || true
  fi
  clean_iptables iptables-save iptables-restore
  clean_iptables ip6tables-save ip6tables-restore
}

clean_cgroups() {
  local d i n=0
  for d in /sys/fs/cgroup/*/kubepods; do
    [[ -d "$d" ]] || continue
    for ((i = 0; i < 10; i++)); do
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d "$d" ]] || break
      sleep 0.3
    done
    if [[ -d "$d" ]]; then log "WARNING: could not remove cgroup $d (still in use?)"; else n=$((n + 1)); fi
  done
  ((n == 0)) || log "removed /kubepods from $n cgroup hierarchies"
}

restore_host() {
  local key value dir l
  if [[ -f "$STATE/sysctl.saved" ]]; then
    while read -r key value; do
      [[ -w "/proc/sys/$key" ]] || continue
      if [[ "$(cat "/proc/sys/$key")" != "$value" ]]; then
        echo "$value" >"/proc/sys/$key" 2>/dev/null && log "restored ${key//\//.} = $value"
      fi
    done <"$STATE/sysctl.saved"
  fi
  # kubelet links every container log into /var/log/containers.
  if [[ -d /var/log/containers ]]; then
    for l in /var/log/containers/*; do
      [[ -L "$l" && "$(readlink "$l")" == "$STATE/"* ]] && rm -f "$l"
    done
  fi
  for dir in "${HOST_DIRS[@]}"; do
    [[ -e "$dir" ]] || continue
    grep -qx "$dir" "$STATE/hostdirs.preexisting" 2>/dev/null && continue
    if [[ "$dir" == /run/containerd || "$dir" == /var/lib/cni || "$dir" == /var/lib/kubelet ]]; then
      # Only this cluster's shims, CNI cache and kubelet (device-plugin socket) used them.
      rm -rf "$dir"
    else
      rmdir "$dir" 2>/dev/null || log "WARNING: $dir was created by the cluster but is not empty; left in place"
    fi
  done
}

# write_registry_config: the local registry (CNCF Distribution) with its blobs
# under the state dir, and containerd's hosts.toml that lets it pull from there
# over plain HTTP (docs/development.md, "The local registry").
write_registry_config() {
  mkdir -p "$STATE/registry" "$STATE/config/certs.d/$REGISTRY"
  cat >"$STATE/config/registry.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $STATE/registry
http:
  addr: $REGISTRY
EOF
  cat >"$STATE/config/certs.d/$REGISTRY/hosts.toml" <<EOF
server = "http://$REGISTRY"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
}

# ---------------------------------------------------------------------------
# Commands

images_cmd() {
  alive containerd || die "containerd of the local cluster is not running; run: hack/local-cluster.sh up"
  local tar out n=0
  shopt -s nullglob
  for tar in "$IMAGES_DIR"/*.tar; do
    if [[ " ${LOCAL_CLUSTER_NO_IMPORT:-} " == *" $(basename "$tar" .tar) "* ]]; then
      log "not importing $(rel "$tar") (LOCAL_CLUSTER_NO_IMPORT: pulled from the registry)"
      continue
    fi
    out="$(ctr_ images import "$tar" 2>&1)" || die "importing $(rel "$tar") failed: $out"
    echo "$out" >>"$LOGS/images.log"
    log "imported $(rel "$tar") ($(tar -xOf "$tar" manifest.json | grep -o '"RepoTags":\["[^"]*' | cut -d'"' -f4))"
    n=$((n + 1))
  done
  ((n > 0)) || log "no image tarballs in $(rel "$IMAGES_DIR") (build them with: make build-images)"
}

# cluster_exists: `up` ran here and `down` has not cleaned up since.
cluster_exists() { [[ -d "$PIDS" || -f "$STATE/sysctl.saved" ]]; }

running_count() {
  local c n=0
  for c in "${COMPONENTS[@]}"; do alive "$c" && n=$((n + 1)); done
  echo "$n"
}

node_ready() {
  [[ "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

up_cmd() {
  [[ $EUID -eq 0 ]] || die "must run as root (kubelet, containerd, iptables, cgroups)"
  mkdir -p "$STATE"
  local running
  running="$(running_count)"
  if ((running == ${#COMPONENTS[@]})); then
    log "the local cluster is already running (state in $(rel "$STATE")); not starting another"
    images_cmd
    log "KUBECONFIG=$KUBECONFIG_OUT"
    return 0
  elif ((running > 0)); then
    status_cmd >&2 || true
    die "the local cluster is partially running (see above); run 'hack/local-cluster.sh down' first"
  elif cluster_exists; then
    log "found leftovers of a cluster that is no longer running; cleaning them up first"
    down_cmd
    mkdir -p "$STATE"
  fi
  [[ ${#CONTAINERD_SOCK} -lt 100 ]] || die "state dir path too long for a unix socket: $CONTAINERD_SOCK"
  mkdir -p "$LOGS" "$PIDS" "$STATE/run" "$STATE/config" "$STATE/etcd" "$STATE/kubelet" "$STATE/pod-logs"
  chmod 700 "$STATE"

  ensure_packages
  ensure_binaries
  ensure_pause_image
  check_ports

  local node_ip t_up=$SECONDS
  node_ip="$(detect_node_ip)"
  log "starting a single-node cluster: Kubernetes $KUBE_VERSION, node $NODE_NAME ($node_ip), pods $POD_CIDR, services $SERVICE_CIDR"
  save_host_state
  generate_pki "$node_ip"
  write_kubeconfig "$KUBECONFIG_OUT" admin retry-local-admin
  write_kubeconfig "$STATE/config/kubelet.kubeconfig" kubelet "system:node:$NODE_NAME"
  write_configs "$node_ip"

  local admin="$KUBECONFIG_OUT"
  launch etcd "$K8S_BIN/etcd" --name "$NODE_NAME" --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "$NODE_NAME=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
  launch registry "$(command -v docker-registry)" serve "$STATE/config/registry.yml"
  launch containerd "$(command -v containerd)" --config "$STATE/config/containerd.toml"
  wait_until etcd "etcd healthy" 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
  wait_until registry "registry serving on $REGISTRY" 30 curl -fsS "http://$REGISTRY/v2/"

  launch_apiserver "$node_ip"

  # Images go in while the API server boots; the sandbox image must be there
  # before kubelet asks for the first pod.
  wait_until containerd "containerd serving on $(rel "$CONTAINERD_SOCK")" 30 ctr -a "$CONTAINERD_SOCK" version
  images_cmd

  wait_until kube-apiserver "kube-apiserver ready" 90 kubectl_ get --raw /readyz
  launch kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$admin" --authentication-kubeconfig "$admin" --authorization-kubeconfig "$admin" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10257 \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
  launch kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$admin" --authentication-kubeconfig "$admin" --authorization-kubeconfig "$admin" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259 --profiling=false
  launch kubelet "$K8S_BIN/kubelet" \
    --config "$STATE/config/kubelet.yaml" --kubeconfig "$STATE/config/kubelet.kubeconfig" \
    --root-dir "$STATE/kubelet" --cert-dir "$PKI/kubelet-generated" \
    --node-ip "$node_ip" --hostname-override "$NODE_NAME"
  launch kube-proxy "$K8S_BIN/kube-proxy" \
    --kubeconfig "$admin" --proxy-mode iptables --hostname-override "$NODE_NAME" \
    --cluster-cidr "$POD_CIDR" --masquerade-all=true \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --iptables-localhost-nodeports=false --nodeport-addresses primary \
    --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256

  wait_until kubelet "node $NODE_NAME Ready" "$READY_TIMEOUT" node_ready
  wait_until kube-controller-manager "service account default/default" 60 kubectl_ -n default get serviceaccount default
  wait_until kube-controller-manager "configmap default/kube-root-ca.crt" 60 kubectl_ -n default get configmap kube-root-ca.crt
  wait_until kube-proxy "kube-proxy healthy" 60 curl -fsS http://127.0.0.1:10256/healthz
  local c
  for c in "${COMPONENTS[@]}"; do alive "$c" || failed "$c" "exited after starting"; done

  log "local cluster is up in $((SECONDS - t_up))s: node $NODE_NAME Ready, Kubernetes $KUBE_VERSION"
  log "  export KUBECONFIG=$KUBECONFIG_OUT"
  log "  kubectl: $K8S_BIN/kubectl    logs: $(rel "$LOGS")/    tear down: hack/local-cluster.sh down"
}

down_cmd() {
  if ! cluster_exists; then
    log "no local cluster in $(rel "$STATE"); nothing to do"
    return 0
  fi
  [[ $EUID -eq 0 ]] || die "must run as root"
  log "tearing down the local cluster in $(rel "$STATE")"
  # kubelet first, so it restarts nothing; then the pods; then the rest in reverse.
  stop kubelet
  alive containerd && stop_containers
  kill_leftovers
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    [[ "${COMPONENTS[i]}" == kubelet ]] && continue
    stop "${COMPONENTS[i]}"
  done
  kill_leftovers
  unmount_all
  clean_network
  clean_cgroups
  restore_host
  if [[ -d "$LOGS" ]]; then
    rm -rf "$LOGS_KEPT"
    mkdir -p "$(dirname "$LOGS_KEPT")"
    cp -r "$LOGS" "$LOGS_KEPT"
  fi
  # Only what `up` created: other tools may keep files in the same folder.
  local entry
  for entry in "${OWNED[@]}"; do
    rm -rf "${STATE:?}/$entry" || { unmount_all; rm -rf "${STATE:?}/$entry"; }
  done
  rmdir "$STATE" 2>/dev/null || log "kept $(rel "$STATE")/: it holds files this script did not create"
  log "local cluster removed (last logs kept in $(rel "$LOGS_KEPT")/)"
}

# stop-apiserver / start-apiserver / restart-apiserver: what a crashing API
# server does to every client: watches cut,
# connections refused until the new one is ready. etcd keeps the data; the PKI
# and flags are the same.
stop-apiserver_cmd() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  alive kube-apiserver || die "kube-apiserver of the local cluster is not running"
  local t0
  t0="$(date +%s%N)"
  # SIGKILL: with SIGTERM kube-apiserver refuses connections at once but takes
  # 20 s or more to exit, too long an outage to start again on the same port.
  stop kube-apiserver KILL
  log "kube-apiserver killed in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

start-apiserver_cmd() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  alive etcd || die "etcd of the local cluster is not running; run: hack/local-cluster.sh up"
  alive kube-apiserver && { log "kube-apiserver is already running"; return 0; }
  local t0
  t0="$(date +%s%N)"
  launch_apiserver "$(detect_node_ip)"
  wait_until kube-apiserver "kube-apiserver ready" 90 kubectl_ get --raw /readyz
  log "kube-apiserver ready $(( ($(date +%s%N) - t0) / 1000000 )) ms after its start"
}

restart-apiserver_cmd() {
  stop-apiserver_cmd
  start-apiserver_cmd
}

# kill-container NS POD NAME: SIGKILL the container's task; the kubelet sees it
# exit and restarts it as the pod's restartPolicy (or the sidecar's) says.
kill-container_cmd() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  (($# == 3)) || die "usage: hack/local-cluster.sh kill-container NAMESPACE POD CONTAINER"
  local ns="$1" pod="$2" name="$3" id
  id="$(kubectl_ -n "$ns" get pod "$pod" -o "jsonpath={.status.initContainerStatuses[?(@.name==\"$name\")].containerID}{.status.containerStatuses[?(@.name==\"$name\")].containerID}")" ||
    die "cannot read pod $ns/$pod"
  id="${id#containerd://}"
  [[ -n "$id" ]] || die "pod $ns/$pod has no running container $name"
  ctr_ tasks kill -s SIGKILL "$id" || die "containerd could not kill container $name ($id) of $ns/$pod"
  log "killed container $name of $ns/$pod (containerd id ${id:0:12})"
}

# cut-network NS POD SECONDS: every packet in or out of the pod's network
# namespace but loopback is dropped for SECONDS (iptables, whose Debian
# backend is nftables, run inside that namespace), then the rules go; the
# pod's processes keep running, as on a node cut off from the network.
cut-network_cmd() {
  [[ $EUID -eq 0 ]] || die "must run as root"
  (($# == 3)) || die "usage: hack/local-cluster.sh cut-network NAMESPACE POD SECONDS"
  local ns="$1" pod="$2" secs="$3" id pid
  id="$(kubectl_ -n "$ns" get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].containerID}')" ||
    die "cannot read pod $ns/$pod"
  id="${id#containerd://}"
  [[ -n "$id" ]] || die "pod $ns/$pod has no running container"
  pid="$(ctr_ tasks ls | awk -v id="$id" '$1 == id { print $2 }')"
  [[ -n "$pid" ]] || die "no task for container ${id:0:12} of $ns/$pod"
  local rules=(-m comment --comment retry-chaos -j DROP)
  nsenter -t "$pid" -n iptables -I INPUT ! -i lo "${rules[@]}"
  nsenter -t "$pid" -n iptables -I OUTPUT ! -o lo "${rules[@]}"
  log "cut the network of $ns/$pod (pid $pid) for ${secs}s"
  sleep "$secs"
  nsenter -t "$pid" -n iptables -D INPUT ! -i lo "${rules[@]}"
  nsenter -t "$pid" -n iptables -D OUTPUT ! -o lo "${rules[@]}"
  log "restored the network of $ns/$pod"
}

status_cmd() {
  if ! cluster_exists; then
    echo "local cluster: not running (no $(rel "$STATE"))"
    return 1
  fi
  local c ok=0 pid
  echo "local cluster: state $(rel "$STATE"), kubeconfig $KUBECONFIG_OUT"
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then
      pid="$(recorded_pid "$c")"
      printf '  %-24s running  pid %-8s log %s\n' "$c" "$pid" "$(rel "$LOGS/$c.log")"
      ok=$((ok + 1))
    else
      printf '  %-24s DOWN              log %s\n' "$c" "$(rel "$LOGS/$c.log")"
    fi
  done
  if alive kube-apiserver; then
    echo "  node $NODE_NAME: $(kubectl_ get node "$NODE_NAME" -o 'jsonpath={range .status.conditions[?(@.type=="Ready")]}Ready={.status} ({.reason}){end}' 2>/dev/null || echo unknown)"
  fi
  ((ok == ${#COMPONENTS[@]}))
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    up | down | images | restart-apiserver | stop-apiserver | start-apiserver)
      # One invocation at a time (the lock is this script file itself).
      exec 9<"$SELF"
      if ! flock -n 9; then
        log "waiting for another hack/local-cluster.sh to finish"
        flock -w 900 9 || die "another hack/local-cluster.sh is still running after 15 min"
      fi
      "${cmd}_cmd"
      ;;
    status) status_cmd ;;
    registry) echo "$REGISTRY" ;;
    ctr) shift; alive containerd || die "containerd of the local cluster is not running"; ctr_ "$@" ;;
    kill-container) shift; kill-container_cmd "$@" ;;
    cut-network) shift; cut-network_cmd "$@" ;;
    kubeconfig)
      [[ -f "$KUBECONFIG_OUT" ]] || log "WARNING: no local cluster is running; $KUBECONFIG_OUT does not exist yet"
      echo "$KUBECONFIG_OUT"
      ;;
    *) usage ;;
  esac
}

main "$@"
