#!/usr/bin/env bash
# Makes the Harbor venv ahe's Harbor interop uses and tests against (idempotent): Harbor
# (PyPI `harbor`, pinned) needs Python >= 3.12; Debian 12 has 3.11, so a newer python3 on PATH
# or under pyenv is used. Prints the venv's python on stdout.
#
#   scripts/setup-harbor.sh [VENV]   (default: $HARBOR_VENV or ~/.cache/ahe/harbor-venv)
set -euo pipefail
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
