#!/usr/bin/env bash
# Benchmarks the embedded local model: decode and prefill tokens/s, and the latency of each
# turn of an agent conversation with and without KV prefix reuse (release build).
#   scripts/bench-model.sh [--model PATH] [--threads N] [--turns N]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! printf '%s\n' "$@" | grep -qx -- --model; then
  bash scripts/fetch-model.sh >/dev/null
fi
exec cargo run --release -q -p ahe-model --example bench_model -- "$@"
