#!/usr/bin/env bash
# The reward-integrity change checks on the largest real change sets: real Terminal-Bench 2
# tasks whose oracle solutions leave thousands of files (apt, pip, compilers) through
# `ahe bench check --oracle --sandbox docker` (the same command as scripts/tb2-table.sh, nop
# aside), and per trial where the checks' time went (result.json timings.integrity_ms and
# change_set walk/diff/reset/judge_us, walked/agent/verifier/reset sizes).
#
#   scripts/bench-integrity-large.sh [TB2_DIR] [--tasks a,b] [--rounds N] [--sandbox docker|local]
#
# AHE=path/to/ahe picks the binary (default target/release/ahe); AHE_B=another/ahe runs a
# second binary too, round by round in turn with the first (both meet the machine's load
# alike), for a before/after side by side. Prints one line per trial and `FIGURE` lines
# (median per task and binary). Needs the task images (scripts/tb2-standins.sh builds the
# bases; the first run builds the tasks).
set -euo pipefail
cd "$(dirname "$0")/.."
tb2=../shared/terminal-bench-2
tasks=largest-eigenval,configure-git-webserver,dna-assembly,kv-store-grpc
rounds=1
sandbox=docker
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --sandbox) sandbox=$2; shift ;;
    -*) echo "bench-integrity-large: unknown option '$1'" >&2; exit 2 ;;
    *) tb2=$1 ;;
  esac
  shift
done
[ -d "$tb2" ] || { echo "bench-integrity-large: no Terminal-Bench 2 tasks at $tb2" >&2; exit 2; }
a=${AHE:-target/release/ahe}
[ -x "$a" ] || cargo build --release -q -p ahe-cli
bins=("$a")
[ -n "${AHE_B:-}" ] && bins+=("$AHE_B")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for i in "${!bins[@]}"; do
    d="$out/bin$i-round$r"
    echo "round $r, ${bins[$i]}: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "${bins[$i]}" bench check "$tb2" --oracle --sandbox "$sandbox" --pull never --json \
      --out "$d" --concurrency 1 --tasks "$tasks" --timeout-cap "${AHE_TB2_CAP:-900}" \
      >"$d.json" 2>"$d.log" || true
  done
done
python3 - "$out" "${bins[@]}" <<'PY'
import glob, json, os, statistics, sys
out, bins = sys.argv[1], sys.argv[2:]
rows = {}
for f in sorted(glob.glob(f"{out}/bin*-round*/*/oracle/result.json")):
    run = f[len(out) + 1:].split("/")[0]
    b = int(run[3:].split("-")[0])
    r = json.load(open(f))
    cs = r.get("change_set") or {}
    ms = r["timings"].get("integrity_ms", 0)
    st = [cs.get(k, 0) / 1000 for k in ("walk_us", "diff_us", "reset_us", "judge_us")]
    print(f"{run} {r['task']}: {r['status']}{' SUSPECT' if r.get('suspect') else ''} "
          f"checks {ms} ms (walk {st[0]:.1f}, diff {st[1]:.1f}, reset {st[2]:.1f}, "
          f"judge {st[3]:.1f}); walked {cs.get('walked')} agent {cs.get('agent')} "
          f"verifier {cs.get('verifier')} reset {cs.get('reset')}")
    rows.setdefault((r["task"], b), []).append([ms] + st)
for (task, b), v in sorted(rows.items()):
    med = [statistics.median(x[i] for x in v) for i in range(5)]
    tag = f"{task.replace('-', '_')}_bin{b}"
    print(f"FIGURE integrity_{tag}_ms {med[0]:.0f}  ({os.path.basename(bins[b])}; walk "
          f"{med[1]:.1f} diff {med[2]:.1f} reset {med[3]:.1f} judge {med[4]:.1f})")
PY
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
