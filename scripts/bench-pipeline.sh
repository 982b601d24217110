#!/usr/bin/env bash
# Times the post-rollout pipeline (clean, scores, exercised files, attribute) on a synthetic
# iteration: 89 tasks × 2 trials × 300 turns by default. Target: total ≤ 2 s on 2 cores.
# Usage: scripts/bench-pipeline.sh [TASKS [TRIALS [TURNS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -q -p ahe-evolve --example bench_pipeline -- "$@"
