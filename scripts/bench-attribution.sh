#!/usr/bin/env bash
# Attribution against a known ground truth: random scripted `ahe evolve` runs (local
# sandbox, mock models whose success depends on exact harness lines) with injected
# harmful changes — predicted or not, some sharing a file with helpful ones, some breaking
# two tasks, some made an iteration later. Prints, per benchmark size and k, the share of
# harmful changes detected and rolled back (HARMFUL, or UNJUDGED and reverted), helpful lines
# lost to rollbacks, harmful lines left in `best`, and the share of confirmation +
# counterfactual trials. Needs bubblewrap (scripts/setup.sh), no model, no internet.
# Usage: scripts/bench-attribution.sh [--scenarios 4] [--sizes "8 20 89"] [--ks "2 3"] [--seed 1]
#        scripts/bench-attribution.sh --tasks 89 [--k 2] [--scenarios 10]   (one size)
#        ... --tasks 8 --no-floor   (the control: no harm floor, UNJUDGED changes kept)
#        ... --ahe PATH   (another build of ahe, e.g. an older commit's, for a before/after)
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=4 sizes="8 20 89" ks="2 3" seed=1 single=() ahe=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scenarios) scenarios=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ks) ks=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --tasks|--k) single+=("$1" "$2"); shift 2 ;;
    --no-floor) single+=("$1"); shift ;;
    --ahe) ahe=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
cargo build -q -p ahe-cli --bin ahe
cargo build -q -p ahe-cli --example bench_attribution
target="${CARGO_TARGET_DIR:-$PWD/target}"
bench="$target/debug/examples/bench_attribution"
ahe="${ahe:-$target/debug/ahe}"
if [ ${#single[@]} -gt 0 ]; then
  exec "$bench" "$ahe" --scenarios "$scenarios" --seed "$seed" "${single[@]}"
fi
summary=()
for n in $sizes; do
  for k in $ks; do
    echo "=== $n tasks, k = $k"
    out=$("$bench" "$ahe" --scenarios "$scenarios" --tasks "$n" --k "$k" --seed "$seed")
    echo "$out"
    summary+=("$(grep '^SUMMARY' <<<"$out")")
  done
done
echo "=== summary (targets: detection >= 95%, lost 0, in_best 0, extra share <= 25% at 89 tasks)"
printf '%s\n' "${summary[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
