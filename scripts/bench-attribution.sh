#!/usr/bin/env bash
# Attribution against a known ground truth: random scripted `ahe evolve` runs (local
# sandbox, mock models whose success depends on exact harness lines) with injected
# harmful changes, predicted or not, some sharing a file with helpful ones. Prints the share
# of harmful changes detected and rolled back, helpful lines lost to rollbacks, and the share
# of confirmation + counterfactual trials. Needs bubblewrap (scripts/setup.sh), no model,
# no internet.
# Usage: scripts/bench-attribution.sh [--scenarios 10] [--tasks 89] [--seed 1]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
cargo build -q -p ahe-cli --bin ahe
exec cargo run -q -p ahe-cli --example bench_attribution -- "$PWD/target/debug/ahe" "$@"
