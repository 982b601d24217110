#!/usr/bin/env bash
# The offline quick start: installs what is missing, fetches the embedded model, builds the
# binary (cargo profile `quickstart`: unoptimised Rust, llama.cpp at -O3; see Cargo.toml), runs the evolve loop with configs/quickstart.toml (the local
# SmolLM2-135M model for every role, smoke benchmark, k = 2, 1 iteration) and writes the
# report. Needs no API key and no internet beyond the package registries.
#
# The Docker engine and its base image (debootstrap: mostly download and unpacking), the
# packages only the tests need, and the model download run in the background while cargo
# compiles; `sandbox.backend = "auto"` falls back to
# the local bubblewrap sandbox when they are not ready, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stamp() { echo "quickstart: $1 ($(($(date +%s) - start)) s)"; }
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# Only what the build needs comes first; the rest of the packages, the Docker engine, its
# base image and the model are prepared in the background while cargo compiles.
bash scripts/setup.sh --build-only
stamp "build prerequisites ready"
docker_log=$(mktemp /tmp/ahe-quickstart-docker.XXXXXX.log)
model_log=$(mktemp /tmp/ahe-quickstart-model.XXXXXX.log)
(bash scripts/setup.sh --no-browser --no-base-image && bash scripts/start-dockerd.sh &&
  bash scripts/build-base-image.sh) >"$docker_log" 2>&1 &
prep=$!
bash scripts/fetch-model.sh >/dev/null 2>"$model_log" &
model=$!
trap 'kill_tree "$prep"; kill_tree "$model"' INT TERM
cargo build --profile quickstart -p ahe-cli
stamp "build done"
if ! wait "$model"; then
  echo "quickstart: error: fetching the model failed (log: $model_log):" >&2
  tail -5 "$model_log" >&2
  exit 1
fi
stamp "model ready"
if wait "$prep"; then
  stamp "docker engine and base image ready"
else
  echo "quickstart: warning: the Docker engine or base image is not ready (log: $docker_log);" >&2
  tail -5 "$docker_log" >&2
  echo "            the run uses the local sandbox instead" >&2
fi
trap - INT TERM
bin="${CARGO_TARGET_DIR:-target}/quickstart/ahe"
name="quickstart-$(date +%Y%m%d-%H%M%S)"
"$bin" evolve --config configs/quickstart.toml --name "$name"
stamp "evolve done"
"$bin" report "runs/$name"
stamp "report written"
echo
echo "run directory: runs/$name"
echo "report:        runs/$name/report.html (also runs/$name/report.md)"
