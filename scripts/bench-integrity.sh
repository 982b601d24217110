#!/usr/bin/env bash
# The reward-integrity change checks' cost per trial: runs the adversarial suite's oracle
# (its hacks and controls) on each backend and prints the mean and max of result.json
# timings.integrity_ms (host-side walks of the writable layer, access-time resets, rules),
# and timings.counterfactual_ms: its mean over trials no check flagged (what counterfactual
# verification adds to a trial that is not suspect) and over the runs it made.
#   scripts/bench-integrity.sh [docker local]     Env: AHE (default target/release/ahe)
set -uo pipefail
cd "$(dirname "$0")/.."
AHE=${AHE:-target/release/ahe}
for sb in "${@:-docker local}"; do
  for b in $sb; do
    out=$(mktemp -d)
    "$AHE" bench check benchmarks/adversarial --oracle --sandbox "$b" --out "$out" >"$out.log" 2>&1
    tail -3 "$out.log"
    python3 - "$out" "$b" <<'PY'
import glob, json, sys
out, b = sys.argv[1], sys.argv[2]
rs = [json.load(open(f)) for f in glob.glob(f"{out}/*/oracle/result.json")]
v = [r["timings"].get("integrity_ms", 0) for r in rs]
if v:
    print(f"FIGURE integrity_{b}_ms {sum(v) / len(v):.1f}")
    print(f"FIGURE integrity_{b}_max_ms {max(v)}")
# Counterfactual verification: what it added to the trials that ended unflagged (median: the
# usual trial; mean: with those it cleared of a false alarm, which pay one more verifier run),
# and what a run of it costs where one ran.
import statistics
unflagged = [r["timings"].get("counterfactual_ms", 0) for r in rs if not r.get("suspect")]
ran = [ms for ms in (r["timings"].get("counterfactual_ms", 0) for r in rs) if ms > 0]
if unflagged:
    print(f"FIGURE counterfactual_{b}_unflagged_ms {statistics.median(unflagged):.0f}")
    print(f"FIGURE counterfactual_{b}_unflagged_mean_ms {sum(unflagged) / len(unflagged):.0f}")
if ran:
    print(f"FIGURE counterfactual_{b}_run_ms {sum(ran) / len(ran):.0f}")
    print(f"counterfactual runs on {b}: {len(ran)} (ms: {sorted(ran)})")
PY
    rm -rf "$out" "$out.log"
  done
done
