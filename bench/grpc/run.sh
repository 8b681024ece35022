#!/usr/bin/env bash
# make bench-grpc: gRPC unary calls through retry-sidecar, through HAProxy in
# HTTP/2 mode on both sides (h2c: proto h2 on the bind and on the server line)
# and on a direct connection, in one run on loopback. Writes docs/benchmarks-grpc.md.
#
#   ROUNDS=3 DURATION=5 RATE=2000 CONNS=4 CONCURRENCY=16 bench/grpc/run.sh
#   BASELINE_REF=<git ref> bench/grpc/run.sh   # also measures that ref's sidecar, same run
#
# Everything targets 127.0.0.1 only and every load is bounded in time and count.
# Needs haproxy (installed from Debian with apt-get if missing).
set -euo pipefail

ROUNDS=${ROUNDS:-3}             # interleaved rounds; every run is reported, with median and range
DURATION=${DURATION:-5}         # seconds per measurement
RATE=${RATE:-2000}              # fixed rate of the CPU and latency test, calls/s
CONNS=${CONNS:-4}               # HTTP/2 connections of the load generator
CONCURRENCY=${CONCURRENCY:-16}  # calls in flight per connection (closed loop)
OUT=${OUT:-docs/benchmarks-grpc.md} # docs/performance.md quotes it
BASELINE_REF=${BASELINE_REF:-}  # a git ref whose sidecar is measured beside this tree's ("baseline")

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d /tmp/bench-grpc.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! command -v haproxy >/dev/null; then
  echo "installing haproxy from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
fi

echo "building retry-sidecar, the gRPC server and the load generator"
CGO_ENABLED=0 go build -trimpath -o "$WORK/retry-sidecar" ./cmd/retry-sidecar
go build -o "$WORK/server" ./bench/grpc/server
go build -o "$WORK/loadgen" ./bench/grpc/loadgen
if [ -n "$BASELINE_REF" ]; then
  echo "building the baseline sidecar of $BASELINE_REF"
  BASELINE_SHA=$(git rev-parse --short "$BASELINE_REF") # the ref may move during the run
  mkdir "$WORK/baseline-src"
  git archive "$BASELINE_SHA" | tar -x -C "$WORK/baseline-src"
  (cd "$WORK/baseline-src" && CGO_ENABLED=0 go build -trimpath -o "$WORK/retry-sidecar-baseline" ./cmd/retry-sidecar)
fi

SERVER=127.0.0.1:18180
HAPROXY=127.0.0.1:18181
SIDECAR=127.0.0.1:18190
ADMIN=127.0.0.1:18195
BASELINE=127.0.0.1:18192
BASELINE_ADMIN=127.0.0.1:18197

# --- HAProxy: HTTP/2 cleartext from the client and to the server, no logging
cat >"$WORK/haproxy.cfg" <<EOF
global
  maxconn 4000
  nbthread 2
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind $HAPROXY proto h2
  default_backend be
backend be
  server s1 $SERVER proto h2
EOF
# --- retry-sidecar: a policy for the server that retries UNAVAILABLE of the
# health service, so every call takes the retrying path with its answer held
# until the trailers (docs/grpc.md#in-the-sidecar)
cat >"$WORK/policy.yaml" <<EOF
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: bench-grpc}
spec:
  upstreams:
  - name: server
    hosts: ["$SERVER"]
    retryOn: {grpcStatusCodes: [UNAVAILABLE]}
    replayableMethods: [/grpc.health.v1.Health/*]
EOF

for a in $SERVER $HAPROXY $SIDECAR $ADMIN $BASELINE $BASELINE_ADMIN; do
  if (exec 3<>/dev/tcp/${a%:*}/${a#*:}) 2>/dev/null; then echo "port $a is busy; free it first" >&2; exit 1; fi
done
"$WORK/server" -listen $SERVER -lifetime 1h 2>"$WORK/server.log" & PIDS+=($!)
haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/haproxy.log" 2>&1 & HPID=$!; PIDS+=($HPID)
"$WORK/retry-sidecar" --listen=$SIDECAR --admin-listen=$ADMIN --stats-listen= --policy-file="$WORK/policy.yaml" \
  2>"$WORK/sidecar.log" & SPID=$!; PIDS+=($SPID)
TARGETS="direct haproxy sidecar"
WAIT="$SERVER $HAPROXY $SIDECAR $ADMIN"
if [ -n "$BASELINE_REF" ]; then
  "$WORK/retry-sidecar-baseline" --listen=$BASELINE --admin-listen=$BASELINE_ADMIN --stats-listen= --policy-file="$WORK/policy.yaml" \
    2>"$WORK/baseline.log" & BPID=$!; PIDS+=($BPID)
  TARGETS="$TARGETS baseline"
  WAIT="$WAIT $BASELINE"
fi

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/${1%:*}/${1#*:}) 2>/dev/null && return 0; sleep 0.1; done; echo "no listener on $1" >&2; exit 1; }
for a in $WAIT; do wait_port "$a"; done
curl -fsS -o /dev/null "http://$ADMIN/readyz"

addr() { case $1 in direct) echo $SERVER;; haproxy) echo $HAPROXY;; sidecar) echo $SIDECAR;; baseline) echo $BASELINE;; esac; }
pid_of() { case $1 in haproxy) echo $HPID;; sidecar) echo $SPID;; baseline) echo $BPID;; *) echo "";; esac; }

# One call through each, to see the path works and the sidecar applies its policy.
for t in $TARGETS; do
  echo "$t: $("$WORK/loadgen" once -addr "$(addr $t)" -authority $SERVER)"
done
CHECK=$("$WORK/loadgen" once -addr $SIDECAR -authority $SERVER)
case $CHECK in *'"x-retry-outcome":"success"'*) ;; *) echo "the sidecar did not apply its policy: $CHECK" >&2; exit 1;; esac

# CPU time (utime+stime, clock ticks) of a proxy: HAProxy's threads and the
# sidecar's are counted in their process's own /proc/PID/stat.
cpu_ticks() { # "user system"
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12, $13}'
}
CLK_TCK=$(getconf CLK_TCK)
field() { echo "$1" | sed -E "s/.*\"$2\":([0-9.e+-]+).*/\\1/"; }

: >"$WORK/results"
echo "measuring: $ROUNDS interleaved rounds, ${DURATION}s each, closed loop $CONNS conns x $CONCURRENCY calls, fixed $RATE calls/s"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
  # the order turns each round, so no target always follows the same one
  order=$(echo "$TARGETS" | awk -v k=$(( (round - 1) % $(echo $TARGETS | wc -w) )) '{for (i = 0; i < NF; i++) printf "%s ", $(((i + k) % NF) + 1)}')
  for t in $order; do
    json=$("$WORK/loadgen" closed -addr "$(addr $t)" -authority $SERVER -conns "$CONNS" -concurrency "$CONCURRENCY" -duration "${DURATION}s")
    echo "$round $t cps $(field "$json" calls_per_s)" >>"$WORK/results"
    echo "$round $t closed_p50 $(field "$json" p50_us)" >>"$WORK/results"
    echo "$round $t closed_p99 $(field "$json" p99_us)" >>"$WORK/results"
    echo "$round $t closed_errors $(field "$json" errors)" >>"$WORK/results"
  done
  for t in $order; do
    pid=$(pid_of "$t")
    [ -n "$pid" ] && read -r user0 sys0 < <(cpu_ticks "$pid")
    json=$("$WORK/loadgen" rate -addr "$(addr $t)" -authority $SERVER -conns "$CONNS" -rate "$RATE" -duration "${DURATION}s")
    if [ -n "$pid" ]; then
      # CPU seconds per 100k calls: the warm-up's 400 calls and the measured ones together
      read -r user1 sys1 < <(cpu_ticks "$pid")
      calls=$(( $(field "$json" calls) + 400 ))
      awk -v u=$(( user1 - user0 )) -v k=$(( sys1 - sys0 )) -v hz="$CLK_TCK" -v n=$calls -v r="$round" -v t="$t" \
        'BEGIN { printf "%s %s cpu100k %.3f\n%s %s sys100k %.3f\n", r, t, (u + k) / hz / n * 100000, r, t, k / hz / n * 100000 }' >>"$WORK/results"
    fi
    echo "$round $t rate_p50 $(field "$json" p50_us)" >>"$WORK/results"
    echo "$round $t rate_p99 $(field "$json" p99_us)" >>"$WORK/results"
    echo "$round $t rate_errors $(field "$json" errors)" >>"$WORK/results"
  done
  echo "round $round done ($order)"
done

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the report: every run, then median and range per target
val() { awk -v r="$1" -v t="$2" -v m="$3" '$1 == r && $2 == t && $3 == m {print $4}' "$WORK/results"; }
all() { awk -v t="$1" -v m="$2" '$2 == t && $3 == m {print $4}' "$WORK/results"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m}'; }
range() { sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {if (NR==0) print "n/a"; else printf "%s–%s", lo, hi}'; }
f2() { awk '{printf "%.2f\n", $1}'; }
f3() { awk '{printf "%.3f\n", $1}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 == 0) print "n/a"; else printf "%.2f", a/b }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.3f", u/1000 }'; }
int() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
# per-round ratios of target to HAProxy for a metric
ratios() { for r in $(seq "$ROUNDS"); do ratio "$(val "$r" "$1" "$2")" "$(val "$r" haproxy "$2")"; echo; done; }
verdict() { if awk "BEGIN{exit !($1)}"; then echo met; else echo "**missed**"; fi; }
TP=$(ratios sidecar cps | median | f2); TP_RANGE=$(ratios sidecar cps | range)
CPU=$(ratios sidecar cpu100k | median | f2); CPU_RANGE=$(ratios sidecar cpu100k | range)
if [ -n "$BASELINE_REF" ]; then
  BTP=$(ratios baseline cps | median | f2); BTP_RANGE=$(ratios baseline cps | range)
  BCPU=$(ratios baseline cpu100k | median | f2); BCPU_RANGE=$(ratios baseline cpu100k | range)
fi

{
  echo "# Benchmarks: gRPC through retry-sidecar vs HAProxy (HTTP/2)"
  echo
  echo "Produced by \`make bench-grpc\` (\`ROUNDS=$ROUNDS DURATION=$DURATION RATE=$RATE CONNS=$CONNS CONCURRENCY=$CONCURRENCY bench/grpc/run.sh\`)"
  echo "on $(date -u +%Y-%m-%d), $(nproc) CPUs shared by load generator, proxies and server (load average $LOAD_START before, $LOAD_END after);"
  echo "$(haproxy -v | head -1 | awk '{print "HAProxy",$3}'), $(go version | awk '{print $3}'), grpc-go $(go list -m -f '{{.Version}}' google.golang.org/grpc)."
  echo "Server: grpc-go answering the health service's unary \`Check\` with \`SERVING\` (\`bench/grpc/server\`)."
  echo "Client: \`bench/grpc/loadgen\`, grpc-go, $CONNS HTTP/2 cleartext connections, every call's \`:authority\` the server's address."
  echo "HAProxy: \`mode http\`, \`bind … proto h2\`, \`server … proto h2\`, 2 threads. The sidecar: \`--listen\` (h2c by"
  echo "prior knowledge), a RetryPolicy for the server with \`retryOn.grpcStatusCodes: [UNAVAILABLE]\` and"
  echo "\`replayableMethods: [/grpc.health.v1.Health/*]\`, so every call is admitted, its answer held until its trailers"
  echo "and decided (\`x-retry-outcome: success\`); default flags, log level info."
  echo "Closed loop: $CONNS × $CONCURRENCY calls in flight for ${DURATION}s after 1 s of warm-up. Fixed rate: $RATE calls/s for"
  echo "${DURATION}s after 400 calls of warm-up, round-robin over the connections; CPU = utime+stime of the proxy's process"
  echo "(\`/proc/PID/stat\`) over the fixed-rate run, warm-up included, per 100,000 calls. $ROUNDS interleaved rounds, the"
  echo "targets' order turning each round. Ratios are the sidecar's over HAProxy's of the same round."
  if [ -n "$BASELINE_REF" ]; then echo "\`baseline\` is the sidecar of \`$BASELINE_REF\` ($BASELINE_SHA), measured in the same rounds."; fi
  echo
  echo "## Every run"
  echo
  echo "| round | target | closed loop calls/s | vs HAProxy | p50 (ms) | p99 (ms) | errors | at $RATE calls/s: p50 (ms) | p99 (ms) | errors | CPU s per 100k calls | of it in the kernel | vs HAProxy |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in $(seq "$ROUNDS"); do
    for t in $TARGETS; do
      cpu=$(val "$r" "$t" cpu100k); sys=$(val "$r" "$t" sys100k); cr=$(ratio "$cpu" "$(val "$r" haproxy cpu100k)")
      [ "$t" = direct ] && cpu="—" && sys="—" && cr="—"
      echo "| $r | $t | $(int "$(val "$r" "$t" cps)") | $(ratio "$(val "$r" "$t" cps)" "$(val "$r" haproxy cps)") | $(ms "$(val "$r" "$t" closed_p50)") | $(ms "$(val "$r" "$t" closed_p99)") | $(val "$r" "$t" closed_errors) | $(ms "$(val "$r" "$t" rate_p50)") | $(ms "$(val "$r" "$t" rate_p99)") | $(val "$r" "$t" rate_errors) | $cpu | $sys | $cr |"
    done
  done
  echo
  echo "## Median and range of the $ROUNDS rounds"
  echo
  echo "| target | closed loop calls/s | closed loop p50 (ms) | at $RATE calls/s: p50 (ms) | p99 (ms) | CPU s per 100k calls |"
  echo "|---|---|---|---|---|---|"
  for t in $TARGETS; do
    cpu="$(all "$t" cpu100k | median | f3) ($(all "$t" cpu100k | range))"; [ "$t" = direct ] && cpu="—"
    echo "| $t | $(int "$(all "$t" cps | median)") ($(all "$t" cps | awk '{printf "%.0f\n", $1}' | range)) | $(ms "$(all "$t" closed_p50 | median)") | $(ms "$(all "$t" rate_p50 | median)") ($(ms "$(all "$t" rate_p50 | sort -g | head -1)")–$(ms "$(all "$t" rate_p50 | sort -g | tail -1)")) | $(ms "$(all "$t" rate_p99 | median)") ($(ms "$(all "$t" rate_p99 | sort -g | head -1)")–$(ms "$(all "$t" rate_p99 | sort -g | tail -1)")) | $cpu |"
  done
  echo
  echo "| target ([performance.md](performance.md#grpc)) | measured: median of the rounds (range) | |"
  echo "|---|---|---|"
  echo "| closed-loop calls/s ≥ 0.7× HAProxy's | ${TP}× ($TP_RANGE) | $(verdict "$TP >= 0.7") |"
  echo "| CPU per call at $RATE calls/s ≤ 1.5× HAProxy's | ${CPU}× ($CPU_RANGE) | $(verdict "$CPU <= 1.5") |"
  if [ -n "$BASELINE_REF" ]; then
    echo "| (baseline) closed-loop calls/s vs HAProxy's | ${BTP}× ($BTP_RANGE) | |"
    echo "| (baseline) CPU per call vs HAProxy's | ${BCPU}× ($BCPU_RANGE) | |"
  fi
  echo
  echo "Raw samples (round, target, metric, value; latencies in µs):"
  echo
  echo '```'
  cat "$WORK/results"
  echo '```'
} >"$OUT"
cat "$OUT"
