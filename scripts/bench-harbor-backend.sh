#!/usr/bin/env bash
# Per-trial overhead of `--sandbox harbor` (Harbor's docker environment through the bridge)
# against ahe's own docker backend: the same tasks (benchmarks/smoke), the mock oracle, the
# same k and concurrency, one run each, one after the other. Prints wall time per trial, mean
# trial latency and mean setup/verifier/teardown of both, the difference and the ratio (also
# as `FIGURE name value` lines for scripts/bench.sh).
# Usage: scripts/bench-harbor-backend.sh [K [CONCURRENCY]]   (defaults 2 and 4)
# Env: AHE (default target/release/ahe), TASKS (default benchmarks/smoke),
#      WORK (default target/bench-harbor-backend).
# Needs: a Docker engine, ahe-base:bookworm, the Harbor venv and Compose v2
# (scripts/setup-harbor.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
K=${1:-2}
CONC=${2:-4}
AHE=${AHE:-target/release/ahe}
TASKS=${TASKS:-benchmarks/smoke}
WORK=${WORK:-target/bench-harbor-backend}
mkdir -p "$WORK"
say() { echo "bench-harbor-backend: $*"; }
now() { date +%s.%N; }

[ -x "$AHE" ] || cargo build --release -q -p ahe-cli
if ! bash scripts/setup-harbor.sh >"$WORK/setup.log" 2>&1; then
  say "HARBOR NOT RUN: scripts/setup-harbor.sh failed: $(tail -2 "$WORK/setup.log" | tr '\n' ' ')"
  exit 1
fi

# Harbor with every command and copy through Harbor's own `docker compose` (exec = "harbor"),
# side by side with the default (the Engine API on Harbor's container).
compose_cfg="$WORK/exec-harbor.toml"
printf '[benchmark]\npath = "%s"\n[sandbox]\nbackend = "harbor"\n[sandbox.harbor]\nexec = "harbor"\n' \
  "$TASKS" >"$compose_cfg"

# One eval (NAME SANDBOX [ARGS...]); prints "WALL TRIALS PASSED LATENCY SETUP VERIFIER TEARDOWN SETUP_LATER" (seconds;
# SETUP_LATER: mean setup of the trials after the first-started one of each task).
measure() {
  local name=$1 sandbox=$2 out="$WORK/$1"
  shift 2
  rm -rf "$out"
  local t
  t=$(now)
  if ! "$AHE" eval --harness harness-seed --benchmark "$TASKS" --model mock:oracle \
    --sandbox "$sandbox" -k "$K" --concurrency "$CONC" --out "$out" "$@" >"$WORK/$name.log" 2>&1; then
    say "$name: ahe eval failed: $(tail -2 "$WORK/$name.log" | tr '\n' ' ')" >&2
    return 1
  fi
  local wall
  wall=$(awk "BEGIN {printf \"%.2f\", $(now) - $t}")
  find "$out/trials" -name result.json -print0 | xargs -0 cat | jq -s --arg wall "$wall" -r '
    def mean(f): (map(f) | add) / length / 1000;
    [$wall, length, (map(select(.status == "pass")) | length),
     mean(.timings.total_ms), mean(.timings.setup_ms), mean(.timings.verifier_ms),
     mean(.timings.teardown_ms),
     (group_by(.task) | map(sort_by(.started_at) | .[1:]) | add // []
      | if length > 0 then mean(.timings.setup_ms) else 0 end)]
    | map(tostring) | join(" ")'
}

n=$(ls -d "$TASKS"/*/task.toml | wc -l)
say "$n tasks × k=$K, concurrency $CONC, mock:oracle; load $(cut -d' ' -f1-3 /proc/loadavg)"
read -r d_wall d_n d_pass d_lat d_setup d_ver d_down d_later < <(measure docker docker) || exit 1
say "docker: $d_pass/$d_n passed; wall $d_wall s; latency $d_lat s (setup $d_setup, after each task's first $d_later; verifier $d_ver, teardown $d_down)"
say "load before harbor: $(cut -d' ' -f1-3 /proc/loadavg)"
read -r h_wall h_n h_pass h_lat h_setup h_ver h_down h_later < <(measure harbor harbor) || exit 1
say "harbor: $h_pass/$h_n passed; wall $h_wall s; latency $h_lat s (setup $h_setup, after each task's first $h_later; verifier $h_ver, teardown $h_down)"
read -r c_wall c_n c_pass c_lat c_setup c_ver c_down c_later < <(measure harbor-compose harbor --config "$compose_cfg") || exit 1
say "harbor, exec = \"harbor\": $c_pass/$c_n passed; wall $c_wall s; latency $c_lat s (setup $c_setup, after each task's first $c_later; verifier $c_ver, teardown $c_down)"
say "load after harbor: $(cut -d' ' -f1-3 /proc/loadavg)"
f() { awk "BEGIN {printf \"%.3f\", $1}"; }
d_per=$(f "$d_wall / $d_n")
h_per=$(f "$h_wall / $h_n")
say "wall per trial: harbor $h_per s vs docker $d_per s: +$(f "$h_per - $d_per") s per trial ($(f "$h_per / $d_per")×)"
say "trial latency: harbor $(f "$h_lat") s vs docker $(f "$d_lat") s: +$(f "$h_lat - $d_lat") s (setup +$(f "$h_setup - $d_setup") s, verifier +$(f "$h_ver - $d_ver") s)"
c_per=$(f "$c_wall / $c_n")
say "wall per trial with exec = \"harbor\": $c_per s ($(f "$c_per / $d_per")× docker)"
echo "FIGURE harbor_backend_wall_per_trial_s $h_per"
echo "FIGURE harbor_compose_exec_ratio $(f "$c_per / $d_per")"
echo "FIGURE docker_backend_wall_per_trial_s $d_per"
echo "FIGURE harbor_backend_overhead_per_trial_s $(f "$h_per - $d_per")"
echo "FIGURE harbor_backend_ratio $(f "$h_per / $d_per")"
echo "FIGURE harbor_backend_trial_latency_s $(f "$h_lat")"
echo "FIGURE harbor_backend_setup_s $(f "$h_setup")"
echo "FIGURE docker_backend_setup_s $(f "$d_setup")"
echo "FIGURE harbor_backend_setup_after_first_s $(f "$h_later")"
[ "$h_pass" = "$h_n" ] && [ "$d_pass" = "$d_n" ] && [ "$c_pass" = "$c_n" ] || { say "not every oracle trial passed"; exit 1; }
