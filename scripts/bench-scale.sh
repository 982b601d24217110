#!/usr/bin/env bash
# Scale run: TASKS trivial tasks × k trials with the zero-latency mock oracle on the local
# backend (default 1000 × 10 = 10,000 trials at concurrency 16). Prints trials/s and the
# peak RSS of the `ahe` process (GNU time), as `FIGURE name value` lines too.
# Usage: scripts/bench-scale.sh [TASKS [K [CONCURRENCY]]]
# Env: AHE (the ahe binary; default target/release/ahe, built if missing),
#      SCALE_DIR (work dir; default target/bench-scale; its tasks/ and out/ are replaced).
set -euo pipefail
cd "$(dirname "$0")/.."
TASKS=${1:-1000}
K=${2:-10}
CONC=${3:-16}
AHE=${AHE:-target/release/ahe}
DIR=${SCALE_DIR:-target/bench-scale}

[ -x "$AHE" ] || cargo build --release -q -p ahe-cli
if [ ! -x /usr/bin/time ]; then
  echo "bench-scale: /usr/bin/time is missing (apt-get install time; scripts/setup.sh does)" >&2
  exit 1
fi

# Trivial tasks sharing one environment (`docker_image`, no Dockerfile: nothing is replayed
# per trial): the oracle writes one file, the verifier checks it and writes the reward.
gen_tasks() {
  local root=$1 n=$2 i name d dirs=() scripts=()
  rm -rf "$root"
  for ((i = 0; i < n; i++)); do
    printf -v name 'trivial-%04d' "$i"
    dirs+=("$root/$name/solution" "$root/$name/tests")
    scripts+=("$root/$name/solution/solve.sh" "$root/$name/tests/test.sh")
  done
  mkdir -p "${dirs[@]}" # one process for all, not two per task
  for ((i = 0; i < n; i++)); do
    printf -v name 'trivial-%04d' "$i"
    d=$root/$name
    printf '%s\n' 'schema_version = "1.1"' '' '[metadata]' 'difficulty = "easy"' \
      'category = "scale"' '' '[agent]' 'timeout_sec = 60.0' '' '[verifier]' \
      'timeout_sec = 30.0' '' '[environment]' 'docker_image = "ahe-base:bookworm"' \
      'allow_internet = false' >"$d/task.toml"
    printf 'Write the word `%s` to /app/out.txt.\n' "$name" >"$d/instruction.md"
    printf '#!/bin/bash\necho %s > /app/out.txt\n' "$name" >"$d/solution/solve.sh"
    printf '#!/bin/bash\nif [ "$(cat /app/out.txt 2>/dev/null)" = "%s" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n' \
      "$name" >"$d/tests/test.sh"
  done
  chmod +x "${scripts[@]}"
}

t0=$(date +%s.%N)
gen_tasks "$DIR/tasks" "$TASKS"
t1=$(date +%s.%N)
echo "bench-scale: generated $TASKS tasks in $(awk "BEGIN {printf \"%.2f\", $t1 - $t0}") s under $DIR/tasks"

rm -rf "$DIR/out"
trials=$((TASKS * K))
# CPU time of ahe and of every process it starts (bwrap, the commands...), from a cgroup v1
# cpuacct group when one can be made: unlike wall time it does not depend on what else the
# shared cores are doing, and unlike GNU time it counts processes ahe does not wait for.
cg=""
if [ -w /sys/fs/cgroup/cpuacct ] && mkdir "/sys/fs/cgroup/cpuacct/ahe-bench-scale-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/cpuacct/ahe-bench-scale-$$
fi
echo "bench-scale: ahe eval, $TASKS tasks × k=$K = $trials trials, concurrency $CONC, local sandbox, mock:oracle (load $(cut -d' ' -f1 /proc/loadavg))"
set +e
(
  [ -z "$cg" ] || echo "$BASHPID" >"$cg/cgroup.procs"
  exec /usr/bin/time -v -o "$DIR/time.txt" "$AHE" eval --harness harness-seed \
    --benchmark "$DIR/tasks" --model mock:oracle --sandbox local -k "$K" \
    --concurrency "$CONC" --out "$DIR/out" >"$DIR/eval.stdout" 2>"$DIR/eval.stderr"
)
rc=$?
set -e
cpu_ns=""
if [ -n "$cg" ]; then
  cpu_ns=$(cat "$cg/cpuacct.usage")
  rmdir "$cg" 2>/dev/null || true
fi
if [ $rc -ne 0 ]; then
  echo "bench-scale: ahe eval failed (exit $rc); last lines of $DIR/eval.stderr:" >&2
  tail -5 "$DIR/eval.stderr" >&2
  exit 1
fi
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {
  n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$DIR/time.txt")
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$DIR/time.txt")
cpu=$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u + s}' "$DIR/time.txt")
pass=$(jq '.statuses.pass // 0' "$DIR/out/scores.json")
tps=$(awk "BEGIN {print $trials / $wall}")
rss_mb=$(awk "BEGIN {print $rss_kb / 1024}")
printf 'bench-scale: %d trials (%s passed) in %.1f s wall: %.1f trials/s; peak RSS of ahe %.0f MB\n' \
  "$trials" "$pass" "$wall" "$tps" "$rss_mb"
if [ -n "$cpu_ns" ]; then
  cpu_ms=$(awk "BEGIN {printf \"%.1f\", $cpu_ns / 1e6 / $trials}")
  printf 'bench-scale: cpu time of ahe and all it started: %.1f s = %s ms per trial (ahe alone, GNU time: %.1f s)\n' \
    "$(awk "BEGIN {print $cpu_ns / 1e9}")" "$cpu_ms" "$cpu"
  echo "FIGURE scale_cpu_ms_per_trial $cpu_ms"
fi
if [ "$pass" != "$trials" ]; then
  echo "bench-scale: warning: not every trial passed (see $DIR/out/scores.json)" >&2
fi
echo "FIGURE scale_trials $trials"
echo "FIGURE scale_passed $pass"
echo "FIGURE scale_wall_s $(printf '%.2f' "$wall")"
echo "FIGURE scale_trials_per_s $(printf '%.2f' "$tps")"
echo "FIGURE scale_peak_rss_mb $(printf '%.1f' "$rss_mb")"
