#!/usr/bin/env bash
# The reward-integrity change checks' cost per trial: runs the adversarial suite's oracle
# (23 hacks, 5 controls) on each backend and prints the mean and max of result.json
# timings.integrity_ms (host-side walks of the writable layer, access-time resets, rules).
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
v = [json.load(open(f))["timings"].get("integrity_ms", 0) for f in glob.glob(f"{out}/*/oracle/result.json")]
if v:
    print(f"FIGURE integrity_{b}_ms {sum(v) / len(v):.1f}")
    print(f"FIGURE integrity_{b}_max_ms {max(v)}")
PY
    rm -rf "$out" "$out.log"
  done
done
