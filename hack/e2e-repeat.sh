#!/usr/bin/env bash
# Runs the end-to-end suite N times on one cluster and prints, per case, how
# many runs passed and its slowest time: a flake is a defect not yet
# understood (docs/development.md#flakes). The images are built once; the
# cluster (E2E_CLUSTER, default local) is started once and kept between runs.
#
#   hack/e2e-repeat.sh 10                 # the bar: 10 of 10 for every case
#   E2E_RUN='TestEndToEnd/.*quota' hack/e2e-repeat.sh 5
#
# Each run's log is kept in bin/e2e-repeat/run-<i>.log; the table is printed
# at the end and written to bin/e2e-repeat/summary.txt. Exit status 0 only if
# every case passed in every run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:?usage: hack/e2e-repeat.sh N}"
CLUSTER="${E2E_CLUSTER:-local}"
OUT="$ROOT/bin/e2e-repeat"
START=$SECONDS
log() { printf 'e2e-repeat: [%4ds] %s\n' "$((SECONDS - START))" "$*" >&2; }

mkdir -p "$OUT"
rm -f "$OUT"/run-*.log
cd "$ROOT"
fails=0
for ((i = 1; i <= N; i++)); do
  log "run $i of $N"
  # make test-e2e as CI runs it: the image build is cached after the first run.
  if make --no-print-directory test-e2e E2E_CLUSTER="$CLUSTER" >"$OUT/run-$i.log" 2>&1; then
    log "run $i passed"
  else
    log "run $i FAILED (log: $OUT/run-$i.log)"
    fails=$((fails + 1))
  fi
done

# Every "--- PASS/FAIL: TestEndToEnd/<case> (<s>s)" line of every run: per
# case, the passes, the runs, and the slowest time.
sed -nE 's/^ +--- (PASS|FAIL): TestEndToEnd\/([^ ]+) \(([0-9.]+)s\)$/\1 \3 \2/p' "$OUT"/run-*.log |
  awk -v runs="$N" '
    { c = $3; if (!(c in seen)) order[++n] = c; seen[c]++; if ($1 == "PASS") pass[c]++; if ($2 + 0 > slow[c]) slow[c] = $2 + 0 }
    END {
      printf "%-7s %-8s %s\n", "passed", "slowest", "case"
      for (i = 1; i <= n; i++) {
        c = order[i]; name = c; gsub(/_/, " ", name)
        printf "%3d/%-3d %7.1fs %s\n", pass[c] + 0, runs, slow[c], name
      }
    }' | tee "$OUT/summary.txt"
log "$((N - fails)) of $N runs passed"
((fails == 0))
