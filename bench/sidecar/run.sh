#!/usr/bin/env bash
# make bench-sidecar: retry-sidecar against a direct connection, HAProxy and
# nginx, in one run on loopback (SPEC §8). Writes docs/benchmarks.md.
#
#   ROUNDS=3 DURATION=5 RATE=2000 bench/sidecar/run.sh
#
# Everything targets 127.0.0.1 only and every load is bounded in time and count.
# Needs: haproxy, nginx, wrk (installed from Debian with apt-get if missing).
set -euo pipefail

ROUNDS=${ROUNDS:-3}          # interleaved rounds; medians are reported
DURATION=${DURATION:-5}      # seconds per measurement
RATE=${RATE:-2000}           # fixed rate of the latency test, req/s
CONNS=${CONNS:-32}           # wrk connections (closed loop)
OUT=${OUT:-docs/benchmarks.md}

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

BACKEND=127.0.0.1:18080
HAPROXY=127.0.0.1:18081
NGINXP=127.0.0.1:18082
SIDECAR=127.0.0.1:18090

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

for a in $BACKEND $HAPROXY $NGINXP $SIDECAR 127.0.0.1:18084 127.0.0.1:18085 127.0.0.1:18091 127.0.0.1:18095 127.0.0.1:18096; do
  if (exec 3<>/dev/tcp/${a%:*}/${a#*:}) 2>/dev/null; then echo "port $a is busy; free it first" >&2; exit 1; fi
done
"$NGINX" -c "$WORK/nb/nginx.conf" -p "$WORK/nb" 2>>"$WORK/nb/error.log" & PIDS+=($!)
"$NGINX" -c "$WORK/np/nginx.conf" -p "$WORK/np" 2>>"$WORK/np/error.log" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/haproxy.log" 2>&1 & PIDS+=($!)
"$WORK/retry-sidecar" --listen=$SIDECAR --admin-listen=127.0.0.1:18095 --stats-listen= --policy-file="$WORK/policy.yaml" \
  2>"$WORK/sidecar.log" & SPID=$!; PIDS+=($SPID)

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/${1%:*}/${1#*:}) 2>/dev/null && return 0; sleep 0.1; done; echo "no listener on $1" >&2; exit 1; }
for a in $BACKEND $HAPROXY $NGINXP $SIDECAR; do wait_port "$a"; done
curl -fsS -o /dev/null http://127.0.0.1:18095/readyz
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
sleep 1
RSS_IDLE=$(rss_kib $SPID)

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
TARGETS="direct haproxy nginx sidecar"
addr() { case $1 in direct) echo $BACKEND;; haproxy) echo $HAPROXY;; nginx) echo $NGINXP;; sidecar) echo $SIDECAR;; esac; }

: >"$WORK/results"
RSS_LOAD=0
echo "measuring: $ROUNDS interleaved rounds, ${DURATION}s each, wrk -c$CONNS, fixed $RATE req/s"
for round in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    rps=$(wrk -t2 -c"$CONNS" -d"${DURATION}s" -H "Host: $BACKEND" "http://$(addr $t)/" | awk '/Requests\/sec/ {print $2}')
    echo "$t rps $rps" >>"$WORK/results"
  done
  for t in $TARGETS; do
    if [ "$t" = sidecar ]; then
      # absolute-form through the proxy, exactly what HTTP_PROXY clients send
      ( peak=0; while kill -0 $SPID 2>/dev/null; do r=$(rss_kib $SPID); [ "$r" -gt "$peak" ] && peak=$r && echo $peak >"$WORK/rss_peak"; sleep 0.2; done ) & SAMPLER=$!
      json=$("$WORK/loadgen" rate -url "http://$BACKEND/" -proxy $SIDECAR -rate "$RATE" -duration "${DURATION}s")
      kill $SAMPLER 2>/dev/null || true; wait $SAMPLER 2>/dev/null || true
      RSS_LOAD=$(( $(cat "$WORK/rss_peak") > RSS_LOAD ? $(cat "$WORK/rss_peak") : RSS_LOAD ))
    else
      json=$("$WORK/loadgen" rate -url "http://$(addr $t)/" -rate "$RATE" -duration "${DURATION}s")
    fi
    p50=$(echo "$json" | sed -E 's/.*"p50_us":([0-9.e+]+).*/\1/')
    p99=$(echo "$json" | sed -E 's/.*"p99_us":([0-9.e+]+).*/\1/')
    errs=$(echo "$json" | sed -E 's/.*"errors":([0-9]+).*/\1/')
    echo "$t p50 $p50" >>"$WORK/results"; echo "$t p99 $p99" >>"$WORK/results"; echo "$t errors $errs" >>"$WORK/results"
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

get() { grep "^$1 $2 " "$WORK/results" | awk '{print $3}' | median; }
declare -A V
for t in $TARGETS; do for k in rps p50 p99 errors; do V[$t.$k]=$(get $t $k); done; done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f", a/b }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u/1000 }'; }
over() { awk -v a="$1" -v d="$2" 'BEGIN { printf "%+.3f", (a-d)/1000 }'; }
TP_RATIO=$(ratio "${V[sidecar.rps]}" "${V[haproxy.rps]}")
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
  echo
  echo "| target | throughput (req/s) | vs HAProxy | p50 (ms) | p50 overhead (ms) | p99 (ms) | p99 overhead (ms) | errors |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for t in $TARGETS; do
    echo "| $t | ${V[$t.rps]} | $(ratio "${V[$t.rps]}" "${V[haproxy.rps]}") | $(ms "${V[$t.p50]}") | $(over "${V[$t.p50]}" "${V[direct.p50]}") | $(ms "${V[$t.p99]}") | $(over "${V[$t.p99]}" "${V[direct.p99]}") | ${V[$t.errors]} |"
  done
  echo
  echo "| SPEC §8 target | measured | |"
  echo "|---|---|---|"
  echo "| throughput ≥ 0.7× HAProxy | ${TP_RATIO}× | $(verdict "$TP_RATIO >= 0.7") |"
  echo "| p50 overhead ≤ HAProxy's | $(ms $P50_S) ms vs $(ms $P50_H) ms | $(verdict "$P50_S <= $P50_H") |"
  echo "| p99 overhead ≤ 1.5× HAProxy's | $(ms $P99_S) ms vs $(ms $P99_H) ms | $(verdict "$P99_S <= 1.5 * ($P99_H > 0 ? $P99_H : 0)") |"
  echo "| RSS idle ≤ 20 MiB | $(awk -v k=$RSS_IDLE 'BEGIN{printf "%.1f", k/1024}') MiB | $(verdict "$RSS_IDLE <= 20480") |"
  echo "| RSS at $RATE req/s ≤ 50 MiB | $(awk -v k=$RSS_LOAD 'BEGIN{printf "%.1f", k/1024}') MiB (peak) | $(verdict "$RSS_LOAD <= 51200") |"
  echo "| amplification, 100 % 503, retryPercent 20 ≤ 1.25× | ${AMP_BUDGET}× (maxAttempts 4; without a budget: ${AMP_NONE}×) | $(verdict "$AMP_BUDGET <= 1.25") |"
  echo
  if [ -f bench/sidecar/notes.md ]; then cat bench/sidecar/notes.md; echo; fi
  echo "Raw samples (target, metric, value; latencies in µs):"
  echo
  echo '```'
  cat "$WORK/results"
  echo '```'
} >"$OUT"
cat "$OUT"
