#!/usr/bin/env bash
# Times `ahe report` on a synthetic run of 10 iterations (+ final) × 89 tasks × k=2 (default;
# args: ITERATIONS TASKS K TURNS). Target: ≤ 1 s for report.html + report.md + charts;
# the per-trial trace pages are timed separately (`ahe report --no-trial-pages` skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p ahe-evolve --example bench_report -- "$@"
