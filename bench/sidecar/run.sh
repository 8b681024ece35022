#!/usr/bin/env bash
# make bench-sidecar: retry-sidecar against a direct connection, HAProxy and
# nginx, in one run on loopback. Writes docs/benchmarks.md.
#
#   ROUNDS=3 DURATION=5 RATE=2000 bench/sidecar/run.sh
#   BASELINE_REF=<git ref> bench/sidecar/run.sh   # also measures that ref's sidecar, same run
#
# Everything targets 127.0.0.1 only and every load is bounded in time and count.
# Needs: haproxy, nginx, wrk (installed from Debian with apt-get if missing).
set -euo pipefail

ROUNDS=${ROUNDS:-3}          # interleaved rounds; medians are reported
DURATION=${DURATION:-5}      # seconds per measurement
RATE=${RATE:-2000}           # fixed rate of the latency test, req/s
CONNS=${CONNS:-32}           # wrk connections (closed loop)
OUT=${OUT:-docs/benchmarks.md} # docs/performance.md quotes it
BASELINE_REF=${BASELINE_REF:-} # a git ref whose sidecar is measured beside this tree's ("baseline")

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d /tmp/bench-sidecar.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

echo "building retry-sidecar and loadgen"
CGO_ENABLED=0 go build -trimpath -o "$WORK/retry-sidecar" ./cmd/retry-sidecar
go build -o "$WORK/loadgen" ./bench/sidecar/loadgen
if [ -n "$BASELINE_REF" ]; then
  echo "building the baseline sidecar of $BASELINE_REF"
  BASELINE_SHA=$(git rev-parse --short "$BASELINE_REF") # the ref may move during the run
  git worktree add -f --detach "$WORK/baseline-src" "$BASELINE_REF" >/dev/null 2>&1
  (cd "$WORK/baseline-src" && CGO_ENABLED=0 go build -trimpath -o "$WORK/retry-sidecar-baseline" ./cmd/retry-sidecar)
  git worktree remove --force "$WORK/baseline-src"
fi

BACKEND=127.0.0.1:18080
HAPROXY=127.0.0.1:18081
NGINXP=127.0.0.1:18082
SIDECAR=127.0.0.1:18090
BASELINE=127.0.0.1:18092
ONEPROC=127.0.0.1:18093 # the same sidecar with GOMAXPROCS=1
# TLS origination (docs/tls.md): nginx serves TLS on TLS_UP (and four more ports
# for cold-pool samples); HAProxy and the sidecar both originate TLS to it.
TLS_UP=127.0.0.1:18443
TLS_COLD="127.0.0.1:18444 127.0.0.1:18445 127.0.0.1:18446 127.0.0.1:18447"
HAPROXY_TLS=127.0.0.1:18083
NGINX_STATUS=127.0.0.1:18449   # stub_status of the upstream: connections it accepted

# --- a CA made for this run and the TLS upstream's certificate (ECDSA P-256)
openssl ecparam -name prime256v1 -genkey -noout -out "$WORK/ca.key" 2>/dev/null
openssl req -x509 -new -key "$WORK/ca.key" -subj "/CN=bench CA" -days 1 -out "$WORK/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out "$WORK/up.key" 2>/dev/null
openssl req -new -key "$WORK/up.key" -subj "/CN=upstream.bench" -out "$WORK/up.csr" 2>/dev/null
printf 'subjectAltName=DNS:upstream.bench\nextendedKeyUsage=serverAuth\n' >"$WORK/up.ext"
openssl x509 -req -in "$WORK/up.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial -days 1 \
  -extfile "$WORK/up.ext" -out "$WORK/up.crt" 2>/dev/null
TLS_LISTEN=""
for a in $TLS_UP $TLS_COLD; do TLS_LISTEN="$TLS_LISTEN listen $a ssl;"; done

# --- the upstream: nginx answering a small 200 on keep-alive
mkdir -p "$WORK/nb" "$WORK/np"
cat >"$WORK/nb/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nb/nginx.pid;
error_log $WORK/nb/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nb; proxy_temp_path $WORK/nb; fastcgi_temp_path $WORK/nb; uwsgi_temp_path $WORK/nb; scgi_temp_path $WORK/nb;
  keepalive_requests 1000000;
  server { listen $BACKEND; location / { default_type text/plain; return 200 "ok\n"; } }
  server { $TLS_LISTEN ssl_certificate $WORK/up.crt; ssl_certificate_key $WORK/up.key; ssl_protocols TLSv1.2 TLSv1.3;
           location / { default_type text/plain; return 200 "ok\n"; } }
  server { listen $NGINX_STATUS; location / { stub_status; } }
}
EOF
# --- nginx as a reverse proxy with an upstream keep-alive pool
cat >"$WORK/np/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $WORK/np/nginx.pid;
error_log $WORK/np/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/np; proxy_temp_path $WORK/np; fastcgi_temp_path $WORK/np; uwsgi_temp_path $WORK/np; scgi_temp_path $WORK/np;
  keepalive_requests 1000000;
  upstream be { server $BACKEND; keepalive 256; }
  server { listen $NGINXP; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
EOF
# --- HAProxy, HTTP mode, connection reuse, no logging
cat >"$WORK/haproxy.cfg" <<EOF
global
  maxconn 4000
  nbthread 2
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend fe
  bind $HAPROXY
  default_backend be
backend be
  server s1 $BACKEND
frontend fe_tls
  bind $HAPROXY_TLS
  default_backend be_tls
backend be_tls
  server s1 $TLS_UP ssl verify required ca-file $WORK/ca.crt verifyhost upstream.bench sni str(upstream.bench) alpn http/1.1
EOF
# --- retry-sidecar with a policy for the upstream (the production path)
cat >"$WORK/policy.yaml" <<EOF
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: bench}
spec:
  upstreams:
  - name: backend
    hosts: ["$BACKEND"]
  - name: backend-tls
    hosts: [$(echo $TLS_UP $TLS_COLD | sed 's/\([^ ]*\)/"\1"/g; s/ /, /g')]
    tls: {hostname: upstream.bench, caCertificateRefs: [{name: bench-ca}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bench-ca}
data:
  ca.crt: |
$(sed 's/^/    /' "$WORK/ca.crt")
EOF
cat >"$WORK/outage-budget.yaml" <<EOF
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: outage}
spec:
  upstreams:
  - name: outage
    hosts: ["127.0.0.1:18084", "127.0.0.1:18085"]
    maxAttempts: 4
    backoff: {base: 10ms, max: 100ms}
    budget: {retryPercent: 20, minRetriesPerSecond: 10}
EOF
sed -e 's/retryPercent: 20, minRetriesPerSecond: 10/retryPercent: 100, minRetriesPerSecond: 10000/' \
  "$WORK/outage-budget.yaml" >"$WORK/outage-nobudget.yaml"

for a in $BACKEND $HAPROXY $NGINXP $SIDECAR $BASELINE $ONEPROC $TLS_UP $TLS_COLD $HAPROXY_TLS $NGINX_STATUS 127.0.0.1:18084 127.0.0.1:18085 127.0.0.1:18091 127.0.0.1:18095 127.0.0.1:18096; do
  if (exec 3<>/dev/tcp/${a%:*}/${a#*:}) 2>/dev/null; then echo "port $a is busy; free it first" >&2; exit 1; fi
done
"$NGINX" -c "$WORK/nb/nginx.conf" -p "$WORK/nb" 2>>"$WORK/nb/error.log" & PIDS+=($!)
"$NGINX" -c "$WORK/np/nginx.conf" -p "$WORK/np" 2>>"$WORK/np/error.log" & NPID=$!; PIDS+=($NPID)
haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/haproxy.log" 2>&1 & HPID=$!; PIDS+=($HPID)
"$WORK/retry-sidecar" --listen=$SIDECAR --admin-listen=127.0.0.1:18095 --stats-listen= --policy-file="$WORK/policy.yaml" \
  2>"$WORK/sidecar.log" & SPID=$!; PIDS+=($SPID)
GOMAXPROCS=1 "$WORK/retry-sidecar" --listen=$ONEPROC --admin-listen=127.0.0.1:18098 --stats-listen= --policy-file="$WORK/policy.yaml" \
  2>"$WORK/sidecar-1p.log" & OPID=$!; PIDS+=($OPID)
TARGETS="direct haproxy nginx sidecar sidecar-1p"
if [ -n "$BASELINE_REF" ]; then
  "$WORK/retry-sidecar-baseline" --listen=$BASELINE --admin-listen=127.0.0.1:18097 --policy-file="$WORK/policy.yaml" \
    2>"$WORK/baseline.log" & BPID=$!; PIDS+=($BPID)
  wait_port_later=$BASELINE
  TARGETS="$TARGETS baseline"
fi

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/${1%:*}/${1#*:}) 2>/dev/null && return 0; sleep 0.1; done; echo "no listener on $1" >&2; exit 1; }
for a in $BACKEND $HAPROXY $NGINXP $SIDECAR $ONEPROC $TLS_UP $HAPROXY_TLS ${wait_port_later:-}; do wait_port "$a"; done
curl -fsS -o /dev/null http://127.0.0.1:18095/readyz
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
sleep 1
RSS_IDLE=$(rss_kib $SPID)

accepts() { curl -fsS "http://$NGINX_STATUS/" | awk 'NR==3 {print $1}'; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }

# --- what the first TLS handshake costs: a request through the sidecar to an
# upstream port whose pool is still empty (dial + handshake) against requests on
# the pooled connection; curl opens a fresh connection to the sidecar each time,
# so that part is the same in both. Reference: nginx's own handshake, direct.
via_sidecar() { curl -fsS -o /dev/null -w '%{time_total}\n' -x "http://$SIDECAR" "http://$1/"; }
for a in $TLS_COLD; do via_sidecar "$a" >>"$WORK/tls_cold"; done
for _ in $(seq 15); do via_sidecar "$TLS_UP" >/dev/null; done
for _ in $(seq 15); do via_sidecar "$TLS_UP" >>"$WORK/tls_warm"; done
for _ in $(seq 5); do
  curl -fsS -o /dev/null --cacert "$WORK/ca.crt" --resolve "upstream.bench:${TLS_UP#*:}:127.0.0.1" \
    -w '%{time_connect} %{time_appconnect}\n' "https://upstream.bench:${TLS_UP#*:}/" | awk '{print $2-$1}' >>"$WORK/tls_direct_hs"
done
TLS_COLD_MS=$(median <"$WORK/tls_cold" | awk '{printf "%.3f", $1*1000}')
TLS_WARM_MS=$(median <"$WORK/tls_warm" | awk '{printf "%.3f", $1*1000}')
TLS_DIRECT_HS_MS=$(median <"$WORK/tls_direct_hs" | awk '{printf "%.3f", $1*1000}')
TLS_FIRST_MS=$(awk -v c="$TLS_COLD_MS" -v w="$TLS_WARM_MS" 'BEGIN{printf "%.3f", c-w}')
# CPU time (utime+stime, clock ticks) of a proxy: the process and its children
# (nginx's workers; HAProxy's threads are in its own process's counters).
pid_of() { case $1 in haproxy) echo $HPID;; nginx) echo $NPID;; sidecar) echo $SPID;; sidecar-1p) echo $OPID;; baseline) echo $BPID;; *) echo "";; esac; }
cpu_ticks() { # "user system"
  local u=0 k=0 p f
  [ -z "$1" ] && { echo "0 0"; return; }
  for p in $1 $(pgrep -P "$1" || true); do
    f=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    u=$(( u + $(echo "$f" | awk '{print $12}') )); k=$(( k + $(echo "$f" | awk '{print $13}') ))
  done
  echo "$u $k"
}
CLK_TCK=$(getconf CLK_TCK)
addr() { case $1 in direct) echo $BACKEND;; haproxy) echo $HAPROXY;; nginx) echo $NGINXP;; sidecar) echo $SIDECAR;; sidecar-1p) echo $ONEPROC;; baseline) echo $BASELINE;; esac; }

: >"$WORK/results"
RSS_LOAD=0
echo "measuring: $ROUNDS interleaved rounds, ${DURATION}s each, wrk -c$CONNS, fixed $RATE req/s"
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    rps=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -H "Host: $BACKEND" "http://$(addr $t)/" | awk '/Requests\/sec/ {print $2}')
    echo "$t rps $rps" >>"$WORK/results"
  done
  for t in $TARGETS; do
    pid=$(pid_of "$t"); read -r user0 sys0 < <(cpu_ticks "$pid")
    if [ "$t" = sidecar ]; then
      # absolute-form through the proxy, exactly what HTTP_PROXY clients send
      ( peak=0; while kill -0 $SPID 2>/dev/null; do r=$(rss_kib $SPID); [ "$r" -gt "$peak" ] && peak=$r && echo $peak >"$WORK/rss_peak"; sleep 0.2; done ) & SAMPLER=$!
      json=$("$WORK/loadgen" rate -url "http://$BACKEND/" -proxy $SIDECAR -rate "$RATE" -duration "${DURATION}s")
      kill $SAMPLER 2>/dev/null || true; wait $SAMPLER 2>/dev/null || true
      RSS_LOAD=$(( $(cat "$WORK/rss_peak") > RSS_LOAD ? $(cat "$WORK/rss_peak") : RSS_LOAD ))
    elif [ "$t" = baseline ] || [ "$t" = sidecar-1p ]; then
      json=$("$WORK/loadgen" rate -url "http://$BACKEND/" -proxy "$(addr $t)" -rate "$RATE" -duration "${DURATION}s")
    else
      json=$("$WORK/loadgen" rate -url "http://$(addr $t)/" -rate "$RATE" -duration "${DURATION}s")
    fi
    p50=$(echo "$json" | sed -E 's/.*"p50_us":([0-9.e+]+).*/\1/')
    p99=$(echo "$json" | sed -E 's/.*"p99_us":([0-9.e+]+).*/\1/')
    errs=$(echo "$json" | sed -E 's/.*"errors":([0-9]+).*/\1/')
    if [ -n "$pid" ]; then
      # CPU seconds per 100k requests: warm-up and measured requests together.
      sent=$(echo "$json" | sed -E 's/.*"sent":([0-9]+).*/\1/')
      read -r user1 sys1 < <(cpu_ticks "$pid")
      awk -v u=$(( user1 - user0 )) -v k=$(( sys1 - sys0 )) -v hz="$CLK_TCK" -v n=$(( sent + 400 )) -v t="$t" \
        'BEGIN { printf "%s cpu100k %.3f\n%s sys100k %.3f\n", t, (u + k) / hz / n * 100000, t, k / hz / n * 100000 }' >>"$WORK/results"
    fi
    echo "$t p50 $p50" >>"$WORK/results"; echo "$t p99 $p99" >>"$WORK/results"; echo "$t errors $errs" >>"$WORK/results"
  done
  # TLS origination, closed loop: HAProxy and the sidecar originate TLS to the same
  # nginx; direct-tls is wrk speaking TLS to nginx itself.
  for t in haproxy-tls sidecar-tls direct-tls; do
    case $t in
      haproxy-tls) url="http://$HAPROXY_TLS/";;
      sidecar-tls) url="http://$SIDECAR/";;
      direct-tls) url="https://$TLS_UP/";;
    esac
    before=$(accepts)
    rps=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -H "Host: $TLS_UP" "$url" | awk '/Requests\/sec/ {print $2}')
    echo "$t rps $rps" >>"$WORK/results"
    echo "$t conns $(( $(accepts) - before ))" >>"$WORK/results"
  done
  echo "round $round done"
done

# --- amplification in a 100 % 503 outage, with and without a budget
outage() { # policy file, port
  "$WORK/retry-sidecar" --listen=127.0.0.1:18091 --admin-listen=127.0.0.1:18096 --stats-listen= --policy-file="$1" 2>>"$WORK/outage.log" & local pid=$!
  wait_port 127.0.0.1:18091
  "$WORK/loadgen" outage -listen "127.0.0.1:$2" -proxy 127.0.0.1:18091 -rate 1000 -duration "${DURATION}s" \
    | sed -E 's/.*"amplification":([0-9.e+]+).*/\1/'
  kill $pid; wait $pid 2>/dev/null || true
}
AMP_BUDGET=$(outage "$WORK/outage-budget.yaml" 18084)
AMP_NONE=$(outage "$WORK/outage-nobudget.yaml" 18085)

get() { { grep "^$1 $2 " "$WORK/results" || true; } | awk '{print $3}' | median; }
declare -A V
for t in $TARGETS; do for k in rps p50 p99 errors cpu100k sys100k; do V[$t.$k]=$(get $t $k); done; done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f", a/b }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u/1000 }'; }
over() { awk -v a="$1" -v d="$2" 'BEGIN { printf "%+.3f", (a-d)/1000 }'; }
TP_RATIO=$(ratio "${V[sidecar.rps]}" "${V[haproxy.rps]}")
for t in haproxy-tls sidecar-tls direct-tls; do V[$t.rps]=$(get $t rps); V[$t.conns]=$(get $t conns); done
TLS_RATIO=$(ratio "${V[sidecar-tls.rps]}" "${V[haproxy-tls.rps]}")
P50_S=$(awk -v a="${V[sidecar.p50]}" -v d="${V[direct.p50]}" 'BEGIN{print a-d}')
P50_H=$(awk -v a="${V[haproxy.p50]}" -v d="${V[direct.p50]}" 'BEGIN{print a-d}')
P99_S=$(awk -v a="${V[sidecar.p99]}" -v d="${V[direct.p99]}" 'BEGIN{print a-d}')
P99_H=$(awk -v a="${V[haproxy.p99]}" -v d="${V[direct.p99]}" 'BEGIN{print a-d}')
verdict() { if awk "BEGIN{exit !($1)}"; then echo met; else echo MISSED; fi; }

{
  echo "# Benchmarks: retry-sidecar vs HAProxy vs nginx"
  echo
  echo "Produced by \`make bench-sidecar\` (\`ROUNDS=$ROUNDS DURATION=$DURATION RATE=$RATE CONNS=$CONNS bench/sidecar/run.sh\`)"
  echo "on $(date -u +%Y-%m-%d), $(nproc) CPUs shared by load generator, proxies and upstream; $(haproxy -v | head -1 | awk '{print "HAProxy",$3}'), $("$NGINX" -v 2>&1 | sed 's/.*nginx\//nginx /'), $(go version | awk '{print $3}')."
  echo "Upstream: nginx returning a 3-byte 200 on 127.0.0.1 with keep-alive. The sidecar runs with a RetryPolicy"
  echo "matching the upstream (the production path through \`pkg/retrypolicy\`), default flags, log level info."
  echo "Closed loop: \`wrk -t2 -c$CONNS -d${DURATION}s\` (origin-form with \`Host:\`, routed by Host). Fixed rate:"
  echo "\`bench/sidecar/loadgen rate\` at $RATE req/s for ${DURATION}s after a warm-up (the sidecar in absolute-form via"
  echo "its proxy address, as \`HTTP_PROXY\` clients send). $ROUNDS interleaved rounds; medians. Overhead = target − direct."
  echo "\`sidecar-1p\` is the same sidecar with \`GOMAXPROCS=1\` (one Go scheduler: what a pod with a CPU limit of 1 gets)."
  if [ -n "$BASELINE_REF" ]; then echo "\`baseline\` is the sidecar of \`$BASELINE_REF\` ($BASELINE_SHA), measured in the same rounds."; fi
  echo
  echo "| target | throughput (req/s) | vs HAProxy | p50 (ms) | p50 overhead (ms) | p99 (ms) | p99 overhead (ms) | errors | CPU s per 100k req at $RATE req/s | of it in the kernel | vs HAProxy |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for t in $TARGETS; do
    cpu=${V[$t.cpu100k]}; cr=$(ratio "$cpu" "${V[haproxy.cpu100k]}"); sys=${V[$t.sys100k]}
    [ "$t" = direct ] && cpu="—" && cr="—" && sys="—"
    echo "| $t | ${V[$t.rps]} | $(ratio "${V[$t.rps]}" "${V[haproxy.rps]}") | $(ms "${V[$t.p50]}") | $(over "${V[$t.p50]}" "${V[direct.p50]}") | $(ms "${V[$t.p99]}") | $(over "${V[$t.p99]}" "${V[direct.p99]}") | ${V[$t.errors]} | $cpu | $sys | $cr |"
  done
  echo
  echo "CPU: utime+stime of the proxy's processes (\`/proc/PID/stat\`; nginx master and workers summed, HAProxy's"
  echo "threads are one process) over each fixed-rate run, warm-up included, per 100,000 requests; medians."
  echo "\"Of it in the kernel\" is the stime part: system calls, the loopback TCP stack, wake-ups."
  echo
  echo "| target | measured | |"
  echo "|---|---|---|"
  echo "| throughput ≥ 0.7× HAProxy | ${TP_RATIO}× | $(verdict "$TP_RATIO >= 0.7") |"
  echo "| p50 overhead ≤ HAProxy's | $(ms $P50_S) ms vs $(ms $P50_H) ms | $(verdict "$P50_S <= $P50_H") |"
  echo "| p99 overhead ≤ 1.5× HAProxy's | $(ms $P99_S) ms vs $(ms $P99_H) ms | $(verdict "$P99_S <= 1.5 * ($P99_H > 0 ? $P99_H : 0)") |"
  echo "| RSS idle ≤ 20 MiB | $(awk -v k=$RSS_IDLE 'BEGIN{printf "%.1f", k/1024}') MiB | $(verdict "$RSS_IDLE <= 20480") |"
  echo "| RSS at $RATE req/s ≤ 50 MiB | $(awk -v k=$RSS_LOAD 'BEGIN{printf "%.1f", k/1024}') MiB (peak) | $(verdict "$RSS_LOAD <= 51200") |"
  echo "| amplification, 100 % 503, retryPercent 20 ≤ 1.25× | ${AMP_BUDGET}× (maxAttempts 4; without a budget: ${AMP_NONE}×) | $(verdict "$AMP_BUDGET <= 1.25") |"
  echo "| TLS origination throughput ≥ 0.7× HAProxy originating TLS | ${TLS_RATIO}× | $(verdict "$TLS_RATIO >= 0.7") |"
  echo
  echo "## TLS origination"
  echo
  echo "The app speaks plain HTTP; the proxy speaks TLS 1.2+/1.3 to nginx (ECDSA P-256 certificate from a CA made"
  echo "for the run), verifying the chain and the name \`upstream.bench\`: HAProxy with \`ssl verify required ca-file"
  echo "… verifyhost upstream.bench\`, the sidecar with \`tls: {hostname: upstream.bench, caCertificateRefs: […]}\`."
  echo "Both keep TLS connections to the upstream pooled (HTTP/1.1). \`wrk -t2 -c$CONNS -d${DURATION}s\`, medians of $ROUNDS rounds."
  echo
  echo "| target | throughput (req/s) | vs HAProxy originating TLS | upstream connections opened per run |"
  echo "|---|---:|---:|---:|"
  for t in haproxy-tls sidecar-tls direct-tls; do
    echo "| $t | ${V[$t.rps]} | $(ratio "${V[$t.rps]}" "${V[haproxy-tls.rps]}") | ${V[$t.conns]} |"
  done
  echo
  echo "First handshake: a request through the sidecar to an upstream whose pool is empty took ${TLS_COLD_MS} ms"
  echo "(median of 4 cold ports) against ${TLS_WARM_MS} ms on a pooled connection: the first request pays"
  echo "**${TLS_FIRST_MS} ms** for the TCP connect and TLS handshake, once per pooled connection. nginx's own"
  echo "handshake, measured by curl directly (\`time_appconnect − time_connect\`), is ${TLS_DIRECT_HS_MS} ms."
  echo
  if [ -f bench/sidecar/notes.md ]; then cat bench/sidecar/notes.md; echo; fi
  echo "Raw samples (target, metric, value; latencies in µs):"
  echo
  echo '```'
  cat "$WORK/results"
  echo '```'
} >"$OUT"
cat "$OUT"
