#!/usr/bin/env bash
# Side by side with Harbor: the benchmarks/smoke tasks run by Harbor's `oracle` agent (docker
# compose on the local engine) and by `ahe eval --model mock:oracle --sandbox docker`, same
# tasks, same k, same concurrency, one after the other. Prints the wall time per trial of
# both and their ratio (also as `FIGURE name value` lines). When Harbor cannot run, it says
# which step failed and why, and still measures ahe.
# Usage: scripts/bench-harbor.sh [K [CONCURRENCY]]   (defaults 2 and 4)
# Env: AHE (default target/release/ahe), HARBOR_VENV (default target/harbor-venv),
#      HARBOR_VERSION (default 0.26.0), HARBOR_WORK (default target/bench-harbor).
# Needs: a Docker engine (scripts/start-dockerd.sh), ahe-base:bookworm
# (scripts/build-base-image.sh), Python ≥ 3.12 and PyPI for Harbor, Debian's archive for
# the Compose v2 plugin when `docker compose` is missing (installed under HARBOR_WORK only).
set -uo pipefail
cd "$(dirname "$0")/.."
K=${1:-2}
CONC=${2:-4}
AHE=${AHE:-target/release/ahe}
VENV=${HARBOR_VENV:-target/harbor-venv}
VERSION=${HARBOR_VERSION:-0.26.0}
WORK=${HARBOR_WORK:-target/bench-harbor}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

say() { echo "bench-harbor: $*"; }
# Harbor is skipped from here on: the exact step and reason, then the ahe side still runs.
harbor_ok=1
cannot() {
  say "HARBOR NOT RUN: $*"
  harbor_ok=0
}
now() { date +%s.%N; }
secs() { awk "BEGIN {printf \"%.2f\", $2 - $1}"; }

if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers (scripts/start-dockerd.sh): neither side can run"
  exit 1
fi
[ -x "$AHE" ] || cargo build --release -q -p ahe-cli

# 1. A Python Harbor accepts (its PyPI releases require ≥ 3.12; Debian 12 ships 3.11).
py=""
for c in python3.13 python3.12 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    py=$p
    break
  fi
done
[ -n "$py" ] || cannot "step 'python': harbor $VERSION requires Python >= 3.12;" \
  "found only $(python3 --version 2>&1) (Debian 12 has no newer python3 package)"

# 2. Harbor in a venv (kept between runs; reinstalled when the version differs).
if [ $harbor_ok = 1 ]; then
  have=$("$VENV/bin/harbor" --version 2>/dev/null || true)
  if [ "$have" != "$VERSION" ]; then
    say "installing harbor==$VERSION into $VENV with $py (first time: a few minutes)"
    t=$(now)
    rm -rf "$VENV"
    if "$py" -m venv "$VENV" && "$VENV/bin/pip" install -q "harbor==$VERSION" >"$WORK/pip.log" 2>&1; then
      say "harbor installed in $(secs "$t" "$(now)") s"
    else
      cannot "step 'pip install harbor==$VERSION' failed: $(tail -2 "$WORK/pip.log" | tr '\n' ' ')"
    fi
  fi
fi

# 3. Harbor drives the engine with `docker compose` (Compose v2). Debian 12 only packages
# Compose v1 (docker-compose 1.29, no `cp`, no `up --wait`); Debian 13's docker-compose 2.x
# needs only libc6 ≥ 2.34, so its plugin binary is unpacked under $WORK (nothing installed).
export DOCKER_CONFIG="$WORK/docker-config"
if [ $harbor_ok = 1 ] && ! docker compose version >/dev/null 2>&1; then
  plugin="$DOCKER_CONFIG/cli-plugins/docker-compose"
  if [ ! -x "$plugin" ]; then
    say "docker compose is missing: unpacking Debian 13's docker-compose (v2) plugin into $DOCKER_CONFIG"
    apt_dir="$WORK/apt-trixie"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/deb"
    echo "deb http://deb.debian.org/debian trixie main" >"$apt_dir/sources.list"
    A=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
      -o "Dir::State::Lists=$apt_dir/lists" -o Debug::NoLocking=1)
    if apt-get "${A[@]}" update -qq >"$WORK/apt.log" 2>&1 &&
      (cd "$apt_dir/deb" && apt-get "${A[@]}" download docker-compose >>"$WORK/apt.log" 2>&1) &&
      dpkg-deb -x "$apt_dir"/deb/docker-compose_*.deb "$apt_dir/root" &&
      mkdir -p "$(dirname "$plugin")" &&
      cp "$apt_dir/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugin"; then
      :
    else
      cannot "step 'docker compose': no Compose v2 plugin and fetching Debian's failed: $(tail -2 "$WORK/apt.log" | tr '\n' ' ')"
    fi
  fi
  if [ $harbor_ok = 1 ] && ! docker compose version >/dev/null 2>&1; then
    cannot "step 'docker compose': the unpacked plugin does not run: $(docker compose version 2>&1 | head -1)"
  fi
fi

# 4. The tasks. Harbor enforces `allow_internet = false` with an egress-control sidecar built
# FROM gogost/gost and a kernel probe on alpine, both pulled from Docker Hub; offline it
# refuses such tasks ("network_mode='no-network' is not supported by docker environment").
# Then both sides run a copy of the smoke tasks with allow_internet = true.
tasks=benchmarks/smoke
if [ $harbor_ok = 1 ]; then
  probe="alpine:3.23.4"
  if ! docker image inspect "$probe" >/dev/null 2>&1 || [ -z "$(docker images -q gogost/gost)" ]; then
    say "Harbor cannot run allow_internet = false tasks offline: its egress-control sidecar" \
      "needs images from Docker Hub ($probe, gogost/gost), unreachable here; both sides run" \
      "a copy of $tasks with allow_internet = true ($WORK/smoke)"
    rm -rf "$WORK/smoke"
    mkdir -p "$WORK/smoke"
    for d in "$tasks"/*/; do
      [ -f "$d/task.toml" ] && cp -r "$d" "$WORK/smoke/"
    done
    sed -i 's/^allow_internet = false/allow_internet = true/' "$WORK"/smoke/*/task.toml
    tasks="$WORK/smoke"
  fi
fi
n_tasks=$(ls -d "$tasks"/*/task.toml | wc -l)
trials=$((n_tasks * K))

# 5. ahe: mock oracle (runs solution/solve.sh through the shell tool) on the docker backend.
say "ahe eval: $n_tasks tasks × k=$K, concurrency $CONC, docker, mock:oracle (load $(cut -d' ' -f1 /proc/loadavg))"
rm -rf "$WORK/ahe-out"
t=$(now)
"$AHE" eval --harness harness-seed --benchmark "$tasks" --model mock:oracle --sandbox docker \
  -k "$K" --concurrency "$CONC" --out "$WORK/ahe-out" >"$WORK/ahe.stdout" 2>"$WORK/ahe.stderr"
rc=$?
ahe_wall=$(secs "$t" "$(now)")
if [ $rc -ne 0 ]; then
  say "ahe eval failed (exit $rc): $(tail -3 "$WORK/ahe.stderr" | tr '\n' ' ')"
  exit 1
fi
ahe_pass=$(jq '.statuses.pass // 0' "$WORK/ahe-out/scores.json")
ahe_mean=$(jq '.durations.mean_trial_sec' "$WORK/ahe-out/scores.json")
ahe_per=$(awk "BEGIN {printf \"%.3f\", $ahe_wall / $trials}")
say "ahe:    $ahe_pass/$trials passed; run wall $ahe_wall s = $ahe_per s per trial; mean trial latency $(printf '%.2f' "$ahe_mean") s"
echo "FIGURE ahe_docker_wall_s $ahe_wall"
echo "FIGURE ahe_docker_wall_per_trial_s $ahe_per"
echo "FIGURE ahe_docker_trial_latency_s $(printf '%.3f' "$ahe_mean")"

# 6. Harbor: its oracle agent on the same tasks, k and concurrency.
if [ $harbor_ok = 1 ]; then
  say "harbor run: $n_tasks tasks × k=$K, concurrency $CONC, docker, oracle agent (load $(cut -d' ' -f1 /proc/loadavg))"
  job="bench-$(date +%Y%m%d-%H%M%S)"
  t=$(now)
  # No network: LiteLLM must not try to fetch its price list.
  LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/harbor" run -p "$tasks" -a oracle -k "$K" \
    -n "$CONC" -o "$WORK/jobs" --job-name "$job" -y -q >"$WORK/harbor.log" 2>&1
  rc=$?
  hb_cmd=$(secs "$t" "$(now)")
  result="$WORK/jobs/$job/result.json"
  if [ $rc -ne 0 ] || [ ! -f "$result" ]; then
    cannot "step 'harbor run' failed (exit $rc): $(grep -E 'Error|error' "$WORK/harbor.log" | tail -2 | tr '\n' ' ')"
  fi
fi
if [ $harbor_ok = 1 ]; then
  # Job wall (its own start..finish, without Python's start-up), mean trial latency, rewards.
  read -r hb_wall hb_mean hb_pass hb_n < <("$VENV/bin/python" - "$WORK/jobs/$job" <<'EOF'
import datetime as d, glob, json, sys
def t(s): return d.datetime.fromisoformat(s.rstrip("Z"))
job = json.load(open(sys.argv[1] + "/result.json"))
wall = (t(job["finished_at"]) - t(job["started_at"])).total_seconds()
lat, ok, n = [], 0, 0
for f in glob.glob(sys.argv[1] + "/*/result.json"):
    r = json.load(open(f)); n += 1
    lat.append((t(r["finished_at"]) - t(r["started_at"])).total_seconds())
    ok += ((r.get("verifier_result") or {}).get("rewards") or {}).get("reward", 0) >= 1
print(f"{wall:.2f} {sum(lat) / max(len(lat), 1):.3f} {ok} {n}")
EOF
)
  hb_per=$(awk "BEGIN {printf \"%.3f\", $hb_wall / $trials}")
  ratio=$(awk "BEGIN {printf \"%.1f\", $hb_per / $ahe_per}")
  say "harbor: $hb_pass/$hb_n passed; job wall $hb_wall s (command $hb_cmd s) = $hb_per s per trial; mean trial latency $hb_mean s"
  say "wall time per trial: harbor $hb_per s / ahe $ahe_per s = ${ratio}× (same $n_tasks tasks, k=$K, concurrency $CONC)"
  echo "FIGURE harbor_wall_s $hb_wall"
  echo "FIGURE harbor_cmd_wall_s $hb_cmd"
  echo "FIGURE harbor_wall_per_trial_s $hb_per"
  echo "FIGURE harbor_trial_latency_s $hb_mean"
  echo "FIGURE harbor_passed $hb_pass"
  echo "FIGURE harbor_ratio $ratio"
else
  echo "FIGURE harbor_ratio n/a"
fi
