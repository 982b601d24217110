#!/usr/bin/env bash
# Makes the Harbor venv ahe's Harbor interop and `[sandbox] backend = "harbor"` use and test
# against (idempotent): Harbor (PyPI `harbor`, pinned) needs Python >= 3.12; Debian 12 has
# 3.11, so a newer python3 on PATH or under pyenv is used. Harbor's docker environment drives
# the engine with `docker compose` (Compose v2), which Debian 12 does not package: when
# `docker compose` is missing, Debian 13's docker-compose plugin (needs only libc6 >= 2.34) is
# downloaded with apt from Debian's archive and unpacked into /usr/local/lib/docker/cli-plugins
# (nothing else is installed). Prints the venv's python on stdout.
#
#   scripts/setup-harbor.sh [VENV]   (default: $HARBOR_VENV or ~/.cache/ahe/harbor-venv)
#   Env: AHE_COMPOSE_PLUGIN_DIR (default /usr/local/lib/docker/cli-plugins, or
#        ~/.docker/cli-plugins when that is not writable)
set -euo pipefail

# Docker Compose v2 as a CLI plugin, unless `docker compose` already works.
compose() {
  command -v docker >/dev/null 2>&1 || {
    echo "setup-harbor: warning: no docker CLI on PATH: Compose not installed" >&2
    return 0
  }
  docker compose version >/dev/null 2>&1 && return 0
  local dir=${AHE_COMPOSE_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
  mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] || dir="$HOME/.docker/cli-plugins"
  mkdir -p "$dir"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  echo "setup-harbor: docker compose is missing: unpacking Debian 13's docker-compose plugin into $dir" >&2
  mkdir -p "$work/lists/partial" "$work/deb"
  echo "deb http://deb.debian.org/debian trixie main" >"$work/sources.list"
  local A=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o Debug::NoLocking=1)
  if ! { apt-get "${A[@]}" update -qq && (cd "$work/deb" && apt-get "${A[@]}" download docker-compose); } >"$work/apt.log" 2>&1; then
    echo "setup-harbor: error: fetching Debian's docker-compose failed: $(tail -3 "$work/apt.log" | tr '\n' ' ')" >&2
    return 1
  fi
  dpkg-deb -x "$work"/deb/docker-compose_*.deb "$work/root"
  install -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$dir/docker-compose"
  if ! docker compose version >/dev/null 2>&1; then
    echo "setup-harbor: error: $dir/docker-compose does not run: $(docker compose version 2>&1 | head -1)" >&2
    return 1
  fi
  echo "setup-harbor: $(docker compose version)" >&2
}
compose
VERSION=${HARBOR_VERSION:-0.26.0}
venv="${1:-${HARBOR_VENV:-$HOME/.cache/ahe/harbor-venv}}"
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))' 2>/dev/null)" = "$VERSION" ]; then
  echo "setup-harbor: harbor $VERSION already in $venv" >&2
  echo "$venv/bin/python"
  exit 0
fi
py=""
for c in python3.13 python3.12 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    py=$p
    break
  fi
done
if [ -z "$py" ]; then
  echo "setup-harbor: error: harbor $VERSION needs Python >= 3.12; found $(python3 --version 2>&1) only (install one with pyenv)" >&2
  exit 1
fi
echo "setup-harbor: installing harbor==$VERSION into $venv with $py (a few minutes the first time)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "harbor==$VERSION" >&2
echo "$venv/bin/python"
