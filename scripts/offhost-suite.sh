#!/usr/bin/env bash
# The adversarial suite where this host does not read the sandbox's layer, beside the local
# docker backend, in one go: (1) docker (layer read on this host), (2) a second Docker engine
# reached as a remote engine of the pool (`remote = true`; started here if it does not
# answer: data root /var/lib/ahe-pool-4, socket /run/ahe-pool-4.sock, bridge ahe-pool-4 made
# with `ip link`, as crates/ahe-cli/tests/pool_support does), (3) Harbor's docker
# environment with `host_layer = false`. Prints, per backend, the hacks blocked or flagged,
# the controls passed unflagged, the outcomes that differ from docker's, the wall time and
# the in-sandbox checks' cost per trial (change_set.inside_ms). Needs root, dockerd, jq and
# the Harbor venv (scripts/setup-harbor.sh); skips what is missing, saying so.
#   scripts/offhost-suite.sh [--tasks a,b] [--concurrency N]
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=()
conc=2
while [ $# -gt 0 ]; do
  case $1 in
    --tasks) tasks=(--tasks "$2"); shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    *) echo "offhost-suite: unknown option $1" >&2; exit 2 ;;
  esac
done
ahe=${AHE:-target/release/ahe}
[ -x "$ahe" ] || ahe=${CARGO_TARGET_DIR:-target}/release/ahe
[ -x "$ahe" ] || { echo "offhost-suite: build ahe first (cargo build --release -p ahe-cli)" >&2; exit 2; }
out=$(mktemp -d /tmp/ahe-offhost.XXXXXX)
bench=$PWD/benchmarks/adversarial

engine_up() { docker -H unix:///run/ahe-pool-4.sock version >/dev/null 2>&1; }
start_engine() {
  engine_up && return 0
  ip link show ahe-pool-4 >/dev/null 2>&1 || {
    ip link add ahe-pool-4 type bridge && ip addr add 10.213.4.1/24 dev ahe-pool-4; }
  ip link set ahe-pool-4 up
  mkdir -p /var/lib/ahe-pool-4 /run/ahe-pool-4
  echo '{}' >/run/ahe-pool-4.json
  env -u TMPDIR setsid dockerd --config-file /run/ahe-pool-4.json --data-root /var/lib/ahe-pool-4 \
    --exec-root /run/ahe-pool-4 --pidfile /run/ahe-pool-4.pid -H unix:///run/ahe-pool-4.sock \
    --bridge ahe-pool-4 --iptables=false --ip-masq=false --cgroup-parent=/ahe-pool-4 \
    >>/var/log/ahe-pool-4.log 2>&1 </dev/null &
  for _ in $(seq 300); do engine_up && break; sleep 0.2; done
  engine_up || { echo "offhost-suite: ahe-pool-4 did not start (/var/log/ahe-pool-4.log)" >&2; return 1; }
}

cat >"$out/remote.toml" <<EOF
[benchmark]
path = "$bench"
[sandbox]
backend = "docker"
hosts = [{name = "far", url = "unix:///run/ahe-pool-4.sock", capacity = $conc, remote = true}]
[models.default]
provider = "mock"
model = "oracle"
EOF
cat >"$out/harbor.toml" <<EOF
[benchmark]
path = "$bench"
[sandbox]
backend = "harbor"
[sandbox.harbor]
environment = "docker"
host_layer = false
[models.default]
provider = "mock"
model = "oracle"
EOF

run() { # name sandbox [config]
  local name=$1 sandbox=$2 cfg=${3:-} t0
  t0=$(date +%s.%N)
  "$ahe" bench check benchmarks/adversarial --oracle --sandbox "$sandbox" ${cfg:+--config "$cfg"} \
    --concurrency "$conc" "${tasks[@]}" --json --out "$out/$name" >"$out/$name.json" \
    2>"$out/$name.log" || echo "offhost-suite: $name: bench check exited $? ($out/$name.log)" >&2
  echo "$(date +%s.%N) - $t0" | bc >"$out/$name.secs"
}

outcomes() { jq -r '.tasks[] | "\(.name) \(.oracle.status == "pass") \(.oracle.suspect)"' "$1" | sort; }

summary() { # name
  local f=$out/$1.json
  [ -s "$f" ] || { printf '%-22s (did not run)\n' "$1"; return; }
  local hacks blocked ctl ok diff ms
  hacks=$(jq '[.tasks[] | select(.oracle.hack == true)] | length' "$f")
  blocked=$(jq '[.tasks[] | select(.oracle.hack == true) | select(.oracle.status != "pass" or .oracle.suspect == true)] | length' "$f")
  ctl=$(jq '[.tasks[] | select(.oracle.hack != true)] | length' "$f")
  ok=$(jq '[.tasks[] | select(.oracle.hack != true) | select(.oracle.status == "pass" and .oracle.suspect == false)] | length' "$f")
  diff=$(comm -3 <(outcomes "$out/docker.json") <(outcomes "$f") | awk '{print $1}' | sort -u | tr '\n' ' ')
  ms=$(jq -r '.tasks[].oracle.trial_dir' "$f" | while read -r d; do
    jq -r '.change_set.inside_ms // empty' "$d/result.json" 2>/dev/null; done |
    awk '{s+=$1; n++; if ($1>m) m=$1} END {if (n) printf "mean %d ms, max %d ms (%d trials)", s/n, m, n; else printf "-"}')
  printf '%-22s hacks %s/%s blocked or flagged, controls %s/%s clean, %6.1f s, differs from docker: [%s], in-sandbox checks: %s\n' \
    "$1" "$blocked" "$hacks" "$ok" "$ctl" "$(cat "$out/$1.secs")" "$diff" "$ms"
}

run docker docker
if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null && start_engine; then
  docker -H unix:///run/ahe-pool-4.sock image inspect ahe-base:bookworm >/dev/null 2>&1 ||
    docker save ahe-base:bookworm | docker -H unix:///run/ahe-pool-4.sock load >/dev/null
  run remote-engine docker "$out/remote.toml"
else
  echo "offhost-suite: no second engine (needs root and dockerd): skipped" >&2
fi
if [ -x "${HARBOR_VENV:-$HOME/.cache/ahe/harbor-venv}/bin/python" ]; then
  run harbor-inside harbor "$out/harbor.toml"
else
  echo "offhost-suite: no Harbor venv (scripts/setup-harbor.sh): skipped" >&2
fi
echo "load: $(uptime)"
for n in docker remote-engine harbor-inside; do summary "$n"; done
echo "logs: $out"
