#!/usr/bin/env bash
# Measures the docker sandbox backend's overhead (per trial and per exec; image prebuilt).
# Needs a Docker engine (scripts/start-dockerd.sh) and ahe-base:bookworm
# (scripts/build-base-image.sh). Env: TRIALS (default 30), EXECS (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -p ahe-sandbox --example bench_docker
