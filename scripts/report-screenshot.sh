#!/usr/bin/env bash
# Writes runs/NAME/report.html (ahe report) and a PNG screenshot of it with headless Chromium,
# for people to look at. Usage: scripts/report-screenshot.sh runs/NAME [OUT.png]
# (default OUT: runs/NAME/report.png; WIDTH and HEIGHT override the window size — the
# height is estimated from the number of iterations and tasks).
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:?usage: scripts/report-screenshot.sh runs/NAME [OUT.png]}"
out="${2:-$run/report.png}"
bin="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$bin" ]; then
  echo "report-screenshot: chromium is not installed (bash scripts/setup.sh installs it)" >&2
  exit 1
fi
cargo run -q -p ahe-cli -- report "$run" >/dev/null
html="$(cd "$run" && pwd)/report.html"
iters=$(find "$run/iterations" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
tasks=$(grep -o 'class="row-label' "$html" | wc -l)
height="${HEIGHT:-$((1900 + 20 * tasks + 720 * iters))}"
[ "$height" -le 16000 ] || height=16000
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
timeout 120 "$bin" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$profile" --window-size="${WIDTH:-1400},$height" \
  --screenshot="$(realpath -m "$out")" "file://$html" 2>/dev/null >/dev/null
echo "screenshot: $out (${WIDTH:-1400}×$height)"
