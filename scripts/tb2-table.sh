#!/usr/bin/env bash
# The real-task table: every Terminal-Bench 2 task through `ahe bench check --oracle --nop`
# on the docker backend (the tasks' own Dockerfiles, solutions and test.sh, unchanged), on the
# stand-in bases of scripts/tb2-standins.sh where the real ones cannot be pulled.
#
#   scripts/tb2-table.sh [TB2_DIR] [--tasks a,b,...] [--concurrency N] [--sandbox docker|local]
#
# Writes target/tb2-table/{check.json,table.json,table.md} and prints the summary line. Each
# task: built or why not (the first error, classified: other host, version pin, package not
# in Debian, no base image, timeout, missing file), oracle pass, nop fail, flagged with the
# reasons, per-trial wall, hand-over and integrity-check cost, change-set size.
# AHE=path/to/ahe picks the binary (default: target/release/ahe, built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
tb2=../shared/terminal-bench-2
tasks=
conc=3
sandbox=docker
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks=$2; shift ;;
    --concurrency) conc=$2; shift ;;
    --sandbox) sandbox=$2; shift ;;
    -*) echo "tb2-table: unknown option '$1'" >&2; exit 2 ;;
    *) tb2=$1 ;;
  esac
  shift
done
[ -d "$tb2" ] || { echo "tb2-table: no Terminal-Bench 2 tasks at $tb2" >&2; exit 2; }
ahe=${AHE:-target/release/ahe}
[ -x "$ahe" ] || cargo build --release -q -p ahe-cli
out=${AHE_TB2_OUT:-target/tb2-table}
mkdir -p "$out"
# A copy, so that a rebuild while the table runs (an hour or more) does not change it midway.
[ "${AHE_TB2_TABLE_ONLY:-0}" = 1 ] || { cp "$ahe" "$out/ahe" && ahe=$out/ahe; }
if [ -z "$tasks" ]; then
  tasks=$(for d in "$tb2"/*/; do [ -f "$d/task.toml" ] && basename "$d"; done | paste -sd, -)
fi
# One run over every task (three at once: most of the time is downloads and builds); the
# table is made from the trial directories, so a run stopped midway still leaves one
# (AHE_TB2_TABLE_ONLY=1 only remakes it). Limits are capped at AHE_TB2_CAP seconds (default
# 900) so that a few hour-long solutions do not hold the table: a capped timeout says so.
t0=$(date +%s)
if [ "${AHE_TB2_TABLE_ONLY:-0}" != 1 ]; then
  "$ahe" bench check "$tb2" --oracle --nop --sandbox "$sandbox" --pull never --json \
    --out "$out/trials-$sandbox" --concurrency "$conc" --tasks "$tasks" \
    --timeout-cap "${AHE_TB2_CAP:-900}" >"$out/check-$sandbox.json" 2>"$out/check-$sandbox.log" || true
fi
# Every built task whose oracle failed under ahe on docker, again with plain docker (no
# ahe): a pass there would be a false failure of ahe's. (The local column is compared with
# the docker one, table-docker.json in the same directory.)
mkdir -p "$out/plain"
for t in $([ "$sandbox" = docker ] && python3 scripts/tb2_table.py "$tb2" "$out" "$sandbox" "$tasks" --failed); do
  [ -s "$out/plain/$t.txt" ] || bash scripts/tb2-plain.sh "$tb2/$t" "$out/plain/$t.txt" >/dev/null
done
echo "tb2-table: ahe bench check took $(( $(date +%s) - t0 )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
python3 scripts/tb2_table.py "$tb2" "$out" "$sandbox" "$tasks"
