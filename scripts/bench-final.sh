#!/usr/bin/env bash
# The final answer's cost and agreement, simulated (docs/final-answer.md): ten-iteration
# runs of per-task Bernoulli outcomes where best moves only when it beats the current best
# beyond noise, then the sequential final answer (the product's decision function) and the
# 2k re-evaluation it replaces (best, seed and runner-up on 2k fresh trials each), on the
# same runs and the same fresh trials (the rule's rounds are the first of the 2k trials), and
# the 2k answer again on independent trials. Scenarios: best truly beats the seed, changes
# that net to nothing, no change at all (a best that left the seed is lucky), and equal (the
# final phase always runs on a best equal to the seed: the false-claim rate). Prints per
# size and k the final phase's trials (median, when best left, mean, p90; target: median <=
# one iteration = tasks x k at 89 tasks, k = 2), how often the answers agree (with the 2k
# answer on the same trials, target >= 95%; on independent trials, with the ceiling no rule
# can pass; with the simulation's truth) and the false claims where best equals the seed
# (<= 5%). Pure simulation: no sandbox, no model, seconds.
# Usage: scripts/bench-final.sh [--runs 400] [--sizes "8 20 89"] [--ks "2 3"] [--seed 1]
#        [--holdout 0.2] [--futility 0.1] [--spending obf|RHO] [--cap ROUNDS] [--ceiling 40]
#        [--equal-runs 4000] [--previous]   (the rule before: Bonferroni spending, half at look 1)
#        [--reuse-seed]   (the biased variant: the seed's own trials)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=400 sizes="8 20 89" ks="2 3" seed=1 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ks) ks=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --holdout|--futility|--spending|--cap|--ceiling|--equal-runs) extra+=("$1" "$2"); shift 2 ;;
    --reuse-seed|--previous) extra+=("$1"); shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
cargo build -q -p ahe-attribution --example bench_final
target="${CARGO_TARGET_DIR:-target}"
bench="$target/debug/examples/bench_final"
summary=()
for n in $sizes; do
  for k in $ks; do
    echo "=== $n tasks, k = $k"
    out=$("$bench" --runs "$runs" --tasks "$n" --k "$k" --seed "$seed" "${extra[@]}")
    echo "$out"
    summary+=("$(grep '^SUMMARY' <<<"$out")")
  done
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
