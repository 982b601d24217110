#!/usr/bin/env bash
# The scheduler overhead of `ahe matrix`: a 3 harnesses × 2 benchmarks (smoke, transfer-lite)
# × 2 models (mock oracle, mock nop) matrix, k = 2, local sandbox, C trials at once, against
# the same 12 cells run as 12 `ahe eval` calls one after another (same concurrency), and the
# ideal wall time (the sum of the trials' durations / C). Prints FIGURE lines.
#   scripts/bench-matrix.sh [C]     (default 4; release build, or BIN=path/to/ahe)
set -euo pipefail
cd "$(dirname "$0")/.."
C=${1:-4}
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build -q --release -p ahe-cli
  bin="${CARGO_TARGET_DIR:-target}/release/ahe"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for h in a b; do
  cp -r harness-seed "$tmp/h-$h"
  echo "Lesson $h." >>"$tmp/h-$h/memory/MEMORY.md"
done
harnesses=(harness-seed "$tmp/h-a" "$tmp/h-b")
benches=(benchmarks/smoke benchmarks/transfer-lite)
models=(mock:oracle mock:nop)
load=$(cut -d' ' -f1 /proc/loadavg)
args=()
for h in "${harnesses[@]}"; do args+=(--harness "$h"); done
for b in "${benches[@]}"; do args+=(--benchmark "$b"); done
for m in "${models[@]}"; do args+=(--model "$m"); done
now() { date +%s.%N; }
t0=$(now)
"$bin" matrix "${args[@]}" -k 2 --sandbox local --concurrency "$C" --out "$tmp/mx" --json >/dev/null 2>&1
t1=$(now)
i=0
for h in "${harnesses[@]}"; do for b in "${benches[@]}"; do for m in "${models[@]}"; do
  i=$((i + 1))
  "$bin" eval --harness "$h" --benchmark "$b" --model "$m" -k 2 --sandbox local \
    --concurrency "$C" --out "$tmp/ev-$i" --json >/dev/null 2>&1
done; done; done
t2=$(now)
trial_ms=$(find "$tmp/mx/cells" -name result.json -exec jq '.timings.total_ms' {} + | awk '{s += $1} END {print s}')
trials=$(find "$tmp/mx/cells" -name result.json | wc -l)
awk -v m="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
  -v s="$(awk -v a="$t1" -v b="$t2" 'BEGIN {print b - a}')" -v ms="$trial_ms" \
  -v c="$C" -v n="$trials" -v load="$load" 'BEGIN {
  ideal = ms / 1000 / c
  printf "FIGURE matrix_3x2x2_wall_s %.1f (%d trials, concurrency %d, load %s)\n", m, n, c, load
  printf "FIGURE sequential_evals_wall_s %.1f\n", s
  printf "FIGURE ideal_wall_s %.1f (sum of trial durations / concurrency)\n", ideal
  printf "FIGURE matrix_scheduler_overhead_s %.1f (%.0f%% over ideal)\n", m - ideal, 100 * (m - ideal) / ideal
}'
