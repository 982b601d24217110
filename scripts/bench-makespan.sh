#!/usr/bin/env bash
# Iteration wall time against its floor: simulates a TB2-like iteration (89 tasks, agent
# times with a long tail, half the tasks debugged) at concurrency 16 through the real
# scheduler and debugger overlap, with sleeping agents and debuggers in no-op sandboxes,
# and prints wall time / lower bound before and after longest-first scheduling and the
# overlapped debugger, and the share of the debug phase hidden behind the rollout.
# Needs no docker, no model, no internet.
# Usage: scripts/bench-makespan.sh [--tasks 89] [--k 2] [--slots 16] [--debuggers 4]
#        [--ms-per-sec 1] [--seed 7]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
exec cargo run -q -p ahe-cli --example bench_makespan -- "$@"
