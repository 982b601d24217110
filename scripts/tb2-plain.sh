#!/usr/bin/env bash
# The comparison for the real-task table: a TB2 task's oracle with plain docker, without ahe
# (Harbor's protocol by hand: build the task's image, copy solution/ to /solution and run
# `bash /solution/solve.sh`, copy tests/ to /tests and run `bash /tests/test.sh`, read
# /logs/verifier/reward.txt). Nothing is killed or checked in between: a task whose oracle
# passes here but fails under ahe is a false failure of ahe's.
#
#   scripts/tb2-plain.sh TASK_DIR [OUT_FILE]      (prints and writes: "plain REWARD SECONDS")
# Env: AHE_TB2_CAP (seconds per step, default 900); AHE_TB2_PLAIN_LIMITS=1 runs the container
# with the task's own [environment] cpus and memory, as ahe and Harbor do (default: no limits).
set -uo pipefail
task=$1
out=${2:-/dev/null}
cap=${AHE_TB2_CAP:-900}
name=$(basename "$task")
img="ahe-plain-$name"
t0=$(date +%s)
result() { echo "plain $1 $(( $(date +%s) - t0 ))" | tee "$out"; }
if ! timeout "$cap" docker build -q -t "$img" "$task/environment" >/dev/null 2>&1; then
  result build-failed
  exit 0
fi
limits=()
if [ "${AHE_TB2_PLAIN_LIMITS:-0}" = 1 ]; then
  cpus=$(sed -n 's/^cpus *= *\([0-9.]*\).*/\1/p' "$task/task.toml" | head -1)
  mem=$(sed -n 's/^memory *= *"\([0-9]*\)\([GM]\)".*/\1\2/p' "$task/task.toml" | head -1 | tr GM gm)
  [ -z "$cpus" ] || limits+=(--cpus "$cpus")
  [ -z "$mem" ] || limits+=(--memory "$mem")
fi
cid=$(docker run -d --label ahe.plain=1 "${limits[@]}" "$img" sleep infinity) || { result run-failed; exit 0; }
trap 'docker rm -f "$cid" >/dev/null 2>&1' EXIT
docker exec "$cid" mkdir -p /solution /tests /logs/verifier /logs/agent
docker cp "$task/solution/." "$cid:/solution" >/dev/null
timeout "$cap" docker exec "$cid" bash /solution/solve.sh >/dev/null 2>&1
docker cp "$task/tests/." "$cid:/tests" >/dev/null
timeout "$cap" docker exec "$cid" bash /tests/test.sh >/dev/null 2>&1
reward=$(docker exec "$cid" cat /logs/verifier/reward.txt 2>/dev/null | tr -d '[:space:]')
result "${reward:-none}"
