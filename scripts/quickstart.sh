#!/usr/bin/env bash
# The offline quick start: installs what is missing, fetches the embedded model, builds the
# binary (cargo profile `quickstart`: unoptimised Rust, llama.cpp at -O3; see Cargo.toml),
# runs the scripted demo (configs/smoke-mock.toml: mock models following a script, labelled
# as such), then the evolve loop with configs/quickstart.toml (the local SmolLM2-135M model
# for every role, smoke benchmark, k = 1, 1 iteration), and writes both reports. Needs no API key and no internet beyond the package registries.
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
bin="${CARGO_TARGET_DIR:-target}/quickstart/ahe"
# First the scripted demo (seconds, no model): mock models whose every answer is written in
# configs/smoke-mock.script.toml, so the loop is seen working — changes proposed with their
# predictions, judged one iteration later, a harmful one rolled back, best chosen, the final
# evaluation. Scripted, not a model's work: the embedded model's honest run follows.
demo="demo-scripted-$(date +%Y%m%d-%H%M%S)"
demo_log=$(mktemp /tmp/ahe-quickstart-demo.XXXXXX.log)
if ! "$bin" evolve --config configs/smoke-mock.toml --name "$demo" >"$demo_log" 2>&1 ||
  ! "$bin" report "runs/$demo" >>"$demo_log" 2>&1; then
  echo "quickstart: error: the scripted demo failed (log: $demo_log):" >&2
  tail -5 "$demo_log" >&2
  exit 1
fi
stamp "scripted demo done (runs/$demo)"
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
name="quickstart-$(date +%Y%m%d-%H%M%S)"
"$bin" evolve --config configs/quickstart.toml --name "$name"
stamp "evolve done"
"$bin" report "runs/$name"
stamp "report written"
echo
echo "1. SCRIPTED demo (mock models reading a script, not a real model): the loop at work,"
echo "   changes with predictions and verdicts, a rollback, the final answer:"
echo "     runs/$demo/report.html"
echo "2. The embedded model's own run (SmolLM2-135M, real decoding, honest and weak):"
echo "     runs/$name/report.html (also runs/$name/report.md)"
echo "Both in the browser, live while a run goes: $bin view runs/   (docs/view.md)"
