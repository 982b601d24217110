#!/usr/bin/env bash
# What Anthropic prompt caching saves: replays one synthetic iteration of agent
# conversations (default 89 tasks x 2 trials x 40 turns) through the anthropic provider
# against the strict local Messages stand-in, caching off then on, and prints input tokens
# billed and dollars at list prices. Needs no key and no internet.
# Usage: scripts/bench-cost.sh [TASKS [TRIALS [TURNS]]]
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run -q -p ahe-model --no-default-features \
  --example bench_cost -- "$@"
