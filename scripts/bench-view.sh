#!/usr/bin/env bash
# Times `ahe view` on a synthetic run of 10,000 trials: 9 iterations (+ final) × 500 tasks
# × k=2, 3 turns per trace (args: ITERATIONS TASKS K TURNS, as scripts/bench-report.sh).
# Target: the run list and the run's page answer in < 1 s. Prints each request's time
# (first request: rendered; second: kept, same change token), with the machine's load.
# PROFILE=dev times an unoptimised build (default: release).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
flag=(--release); dir=release
if [ "$profile" = dev ]; then flag=(); dir=debug; fi
target="${CARGO_TARGET_DIR:-target}"
iters="${1:-9}"; tasks="${2:-500}"; k="${3:-2}"; turns="${4:-3}"
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cargo build "${flag[@]}" -q -p ahe-cli --bin ahe
BENCH_REPORT_KEEP="$work/runs/synth" BENCH_REPORT_SYNTH_ONLY=1 \
  cargo run "${flag[@]}" -q -p ahe-evolve --example bench_report -- "$iters" "$tasks" "$k" "$turns"
"$target/$dir/ahe" view "$work/runs" >"$work/view.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q '^ahe view: http' "$work/view.out" && break; sleep 0.1; done
url="$(sed -n 's/^ahe view: //p' "$work/view.out" | head -1)"
[ -n "$url" ] || { cat "$work/view.out"; exit 1; }
time_get() { # LABEL PATH
  local s
  s=$(curl -s -o "$work/body" -w '%{http_code} %{time_total}' "${url%/}$2")
  printf '%-36s %s s (HTTP %s, %s KB)\n' "$1" "${s#* }" "${s%% *}" "$(( $(stat -c %s "$work/body") / 1024 ))"
}
echo "ahe view $url over $(find "$work/runs/synth/iterations" -name result.json | wc -l) trials ($profile build); load: $(uptime | sed 's/.*load average: //')"
time_get "run list (first request)" /
time_get "run list (again)" /
time_get "run page (first request)" /d/0/synth/report.html
time_get "run page (again)" /d/0/synth/report.html
time_get "trial page" /d/0/synth/report/trials/001/task-000/1.html
time_get "change token" "/_view/token?path=/d/0/synth/report.html"
# A running run: each journal line (a trial finishing, a phase ending) moves the token, and
# the next request renders again (the run's read model loaded once for the page and the row).
for i in 1 2 3; do
  echo '{"ev":"note","iter":10,"message":"bench-view: a change"}' >>"$work/runs/synth/journal.jsonl"
  time_get "run page after a change ($i)" /d/0/synth/report.html
  time_get "run list after it" /
done
echo "load after: $(uptime | sed 's/.*load average: //')"
