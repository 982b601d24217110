#!/usr/bin/env bash
# The performance suite in one run: builds release once, runs every benchmark and prints one
# table (figure, value, target, met, the 1-minute load when it was measured):
#   sandbox overhead per trial and per exec (docker, local), trace writing, the post-rollout
#   pipeline on a synthetic 89 × 2 × 300-turn iteration (clean, scores, attribute, report),
#   a scale run (1,000 trivial tasks × k=10 on the local backend at concurrency 16: trials/s
#   and peak RSS), Harbor side by side (scripts/bench-harbor.sh), and the per-trial overhead
#   of `--sandbox harbor` against ahe's docker backend (scripts/bench-harbor-backend.sh), the
#   witness's CPU per test run (scripts/bench-witness.sh) and the counterfactual verification's
#   cost (scripts/bench-integrity.sh).
# Each section's full output is kept under target/bench/<time>/ (BENCH_OUT to change).
# Env: BENCH_SKIP="docker harbor scale ..." skips sections (local docker trace pipeline
#      scale harbor harbor_backend); SCALE="TASKS K CONCURRENCY" (default "1000 10 16");
#      HARBOR="K CONCURRENCY" (default "2 4"). Target: ≤ 10 minutes on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${BENCH_OUT:-target/bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SKIP=" ${BENCH_SKIP:-} "
read -r S_TASKS S_K S_CONC <<<"${SCALE:-1000 10 16}"
read -r H_K H_CONC <<<"${HARBOR:-2 4}"
T0=$(date +%s)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log() { echo "[bench $(($(date +%s) - T0))s] $*" >&2; }

declare -A FIG LOAD NOTE
# Runs one section: its output goes to $OUT/<name>.log; its FIGURE lines are collected with
# the load at its start.
section() {
  local name=$1
  shift
  if [[ $SKIP == *" $name "* ]]; then
    NOTE[$name]="skipped (BENCH_SKIP)"
    return
  fi
  local l t rc
  l=$(cut -d' ' -f1 /proc/loadavg)
  t=$(date +%s)
  log "$name: $* (load $l)"
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  log "$name: done in $(($(date +%s) - t)) s (exit $rc)"
  while read -r _ k v; do
    FIG[$k]=$v
    LOAD[$k]=$l
  done < <(grep '^FIGURE ' "$OUT/$name.log")
  [ $rc -eq 0 ] || NOTE[$name]="failed (exit $rc): $(grep -v '^FIGURE' "$OUT/$name.log" | tail -1)"
}

log "building release (ahe, the benchmark examples)"
# One cargo invocation: features are unified once, so no crate is compiled twice.
if ! cargo build --release -q -p ahe-cli -p ahe-sandbox -p ahe-evolve -p ahe-harness -p ahe-bench --bin ahe \
  --example bench_local --example bench_docker --example bench_pipeline --example bench_trace \
  --example bench_handover \
  >"$OUT/build.log" 2>&1; then
  echo "bench: the release build failed (see $OUT/build.log)" >&2
  tail -20 "$OUT/build.log" >&2
  exit 1
fi
EX=target/release/examples
BUILD_S=$(($(date +%s) - T0))
log "built in $BUILD_S s"

section local env TRIALS=30 EXECS=200 $EX/bench_local
if docker info >/dev/null 2>&1; then
  section docker env TRIALS=30 EXECS=200 $EX/bench_docker
else
  NOTE[docker]="no Docker engine answers (scripts/start-dockerd.sh)"
  SKIP+=" harbor harbor_backend "
  NOTE[harbor]="no Docker engine"
  NOTE[harbor_backend]="no Docker engine"
fi
section handover env TRIALS=30 $EX/bench_handover
section trace $EX/bench_trace
section integrity env AHE=target/release/ahe bash scripts/bench-integrity.sh "$(docker info >/dev/null 2>&1 && echo docker) local"
section witness bash scripts/bench-witness.sh
section pipeline $EX/bench_pipeline 89 2 300
section scale env AHE=target/release/ahe bash scripts/bench-scale.sh "$S_TASKS" "$S_K" "$S_CONC"
section harbor env AHE=target/release/ahe bash scripts/bench-harbor.sh "$H_K" "$H_CONC"
[ -n "${NOTE[harbor]:-}" ] || NOTE[harbor]=$(grep -h 'HARBOR NOT RUN' "$OUT/harbor.log" 2>/dev/null | head -1)
section harbor_backend env AHE=target/release/ahe bash scripts/bench-harbor-backend.sh "$H_K" "$H_CONC"

# One table row: label, figure key, unit, then optionally a comparison (le|lt|ge) and target.
row() {
  local label=$1 key=$2 unit=$3 op=${4:-} target=${5:-} v met tgt
  v=${FIG[$key]:-}
  tgt="-"
  met=""
  if [ -n "$op" ]; then
    case $op in le) tgt="<= $target $unit" ;; lt) tgt="< $target $unit" ;; ge) tgt=">= $target$unit" ;; esac
    if [[ $v =~ ^[0-9.]+$ ]]; then
      met=$(awk -v v="$v" -v t="$target" -v op="$op" 'BEGIN {
        ok = (op == "le") ? v <= t : (op == "lt") ? v < t : v >= t; print ok ? "yes" : "NO" }')
    else
      met="n/a"
    fi
  fi
  [ -n "$v" ] || v="n/a"
  printf '%-46s %10s %-3s %-13s %-4s %s\n' "$label" "$v" "$([ "$v" = n/a ] || echo "$unit")" "$tgt" "$met" "${LOAD[$key]:-}"
}

# Derived: docker per-trial overhead vs Harbor's wall time per trial on the same engine.
if [[ ${FIG[harbor_wall_per_trial_s]:-} =~ ^[0-9.]+$ && ${FIG[docker_trial_ms]:-} =~ ^[0-9.]+$ ]]; then
  FIG[harbor_vs_docker_overhead]=$(awk "BEGIN {printf \"%.1f\", ${FIG[harbor_wall_per_trial_s]} * 1000 / ${FIG[docker_trial_ms]}}")
  LOAD[harbor_vs_docker_overhead]=${LOAD[harbor_wall_per_trial_s]}
fi

{
  echo
  echo "ahe performance suite, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load at start $LOAD0 (1/5/15 min)"
  echo "logs: $OUT"
  printf '%-46s %10s %-3s %-13s %-4s %s\n' "figure" "value" "" "target" "met" "load"
  row "docker: per-trial overhead (amortized)" docker_trial_ms ms le 300
  row "docker: per-exec overhead (keeper)" docker_exec_ms ms le 15
  row "local (bubblewrap): per-trial overhead" local_trial_ms ms le 50
  row "local (bubblewrap): per-exec overhead" local_exec_ms ms le 5
  row "docker: verifier hand-over, nothing left" docker_handover_ms ms le 20
  row "local (bubblewrap): hand-over, nothing left" local_handover_ms ms le 5
  # An idle leftover waits >= 2 s for a service still starting (docs/reward-integrity.md).
  row "docker: hand-over, idle leftover (2 s by design)" docker_handover_idle_ms ms le 2500
  row "local: hand-over, idle leftover (2 s by design)" local_handover_idle_ms ms le 2500
  row "docker: reward-integrity checks per trial" integrity_docker_ms ms le 50
  row "docker: reward-integrity checks, slowest trial" integrity_docker_max_ms ms
  row "local: reward-integrity checks per trial" integrity_local_ms ms le 10
  row "local: reward-integrity checks, slowest trial" integrity_local_max_ms ms
  row "witness: CPU added per test run" witness_added_cpu_ms ms le 30
  row "witness: wall added per test run (load-noisy)" witness_added_ms ms
  row "docker: counterfactual added, unflagged (median)" counterfactual_docker_unflagged_ms ms le 30
  row "docker: counterfactual added, unflagged (mean)" counterfactual_docker_unflagged_mean_ms ms
  row "docker: counterfactual run, flagged pass" counterfactual_docker_run_ms ms
  row "local: counterfactual added, unflagged (median)" counterfactual_local_unflagged_ms ms le 30
  row "local (plain): per-trial overhead" local_plain_trial_ms ms
  row "local (plain): per-exec overhead" local_plain_exec_ms ms
  row "trace writing, per event" trace_event_us us
  row "pipeline 89x2x300: clean" pipeline_clean_all_s s
  row "pipeline: scores" pipeline_scores_s s
  row "pipeline: exercised files" pipeline_exercised_s s
  row "pipeline: attribute" pipeline_attribute_s s
  row "pipeline: report (html + md + charts)" pipeline_report_s s
  row "pipeline: total" pipeline_s s le 2
  row "pipeline: cpu time of the total" pipeline_cpu_s s
  row "pipeline: + 178 trial pages (not in total)" pipeline_trial_pages_s s
  row "scale $S_TASKS x $S_K local c=$S_CONC: trials" scale_trials ""
  row "scale: passed" scale_passed ""
  row "scale: wall time" scale_wall_s s
  row "scale: throughput" scale_trials_per_s /s
  row "scale: peak RSS of ahe" scale_peak_rss_mb MB lt 1024
  row "scale: cpu per trial (ahe + all it starts)" scale_cpu_ms_per_trial ms
  row "smoke k=$H_K c=$H_CONC docker: ahe wall per trial" ahe_docker_wall_per_trial_s s
  row "smoke: ahe mean trial latency" ahe_docker_trial_latency_s s
  row "smoke: Harbor (oracle) wall per trial" harbor_wall_per_trial_s s
  row "smoke: Harbor mean trial latency" harbor_trial_latency_s s
  row "smoke: Harbor / ahe wall per trial" harbor_ratio x ge 5
  row "Harbor per trial / ahe docker overhead" harbor_vs_docker_overhead x ge 5
  row "smoke --sandbox docker: wall per trial" docker_backend_wall_per_trial_s s
  row "smoke --sandbox harbor: wall per trial" harbor_backend_wall_per_trial_s s
  row "--sandbox harbor overhead per trial" harbor_backend_overhead_per_trial_s s
  row "--sandbox harbor / docker, wall per trial" harbor_backend_ratio x le 2
  row "--sandbox harbor: mean setup" harbor_backend_setup_s s
  row "--sandbox harbor: setup after a task's first" harbor_backend_setup_after_first_s s le 1
  row "--sandbox docker: mean setup" docker_backend_setup_s s
  for s in local docker trace witness pipeline scale harbor harbor_backend; do
    [ -z "${NOTE[$s]:-}" ] || echo "note: $s: ${NOTE[$s]}"
  done
  echo "total time: $(($(date +%s) - T0)) s (of which building: $BUILD_S s); load at end $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/table.txt"
