#!/usr/bin/env bash
# Installs what ahe and its tests need on Debian (idempotent). Run as root or with sudo.
set -euo pipefail

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)

if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install a Rust toolchain (rustup or Debian's cargo)" >&2
  exit 1
fi

# bubblewrap must actually work (user namespaces may be disabled in some containers).
if ! bwrap --ro-bind / / --unshare-all true 2>/dev/null; then
  echo "setup: warning: bubblewrap is installed but cannot create a sandbox here;" >&2
  echo "       the local backend will fall back to plain processes (no isolation)" >&2
fi
echo "setup: ok (bubblewrap $(bwrap --version 2>/dev/null | awk '{print $2}'), $(cargo --version))"
