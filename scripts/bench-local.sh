#!/usr/bin/env bash
# Measures the local sandbox backend's overhead (per trial and per exec), bubblewrap and plain.
# Env: TRIALS (default 50), EXECS (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -p ahe-sandbox --example bench_local
