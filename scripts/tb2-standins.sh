#!/usr/bin/env bash
# Makes local stand-ins for the Docker Hub base images Terminal-Bench 2 tasks start FROM, for
# machines that reach only package mirrors (Debian's archive and PyPI): every stand-in is made
# from Debian's packages and PyPI wheels, nothing else. Docs: docs/tb2-standins.md.
#
#   scripts/tb2-standins.sh [--force] [--no-pull] [TAG ...]
#
# TAG: python:3.13-slim-bookworm ubuntu:24.04 debian:13.0-slim python:3.11-slim python:3.11
#      debian:bullseye-slim (default: all of them)
# --force    rebuilds stand-ins that exist (never replaces an image that is not a stand-in)
# --no-pull  does not try `docker pull TAG` first (by default a tag the registry serves is
#            pulled and no stand-in is made: a stand-in is only for where the real one is out
#            of reach)
#
# Idempotent: a tag that exists (real or stand-in) is left alone. Every stand-in carries the
# labels `ahe.standin=1` and `ahe.standin.recipe=…`; `ahe` notes a trial built on one.
# Downloads (debootstrap trees, the CPython build, the uv wheel) are kept in
# $AHE_STANDIN_CACHE (default /var/cache/ahe-standins) so a second run, or a CI machine that
# keeps that directory, makes the images in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR=${AHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${AHE_STANDIN_CACHE:-/var/cache/ahe-standins}
PY313=3.13.5
UV=0.9.5
RECIPE=2
ALL=(python:3.13-slim-bookworm ubuntu:24.04 debian:13.0-slim python:3.11-slim python:3.11 debian:bullseye-slim)

force=0
pull=1
tags=()
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    --no-pull) pull=0 ;;
    -*) echo "tb2-standins: unknown option '$a'" >&2; exit 2 ;;
    *) tags+=("$a") ;;
  esac
done
[ ${#tags[@]} -gt 0 ] || tags=("${ALL[@]}")
docker info >/dev/null 2>&1 || { echo "tb2-standins: no Docker engine answers (scripts/start-dockerd.sh)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "tb2-standins: debootstrap missing (scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$CACHE"
log() { echo "tb2-standins: $*"; }

# A Debian tree of SUITE with PACKAGES, cached as a tarball; prints the tarball's path.
rootfs() {
  local suite=$1 packages=$2 key tarball
  key=$(echo "$suite $packages" | sha256sum | cut -c1-12)
  tarball="$CACHE/rootfs-$suite-$key.tar"
  if [ ! -s "$tarball" ]; then
    local d
    d=$(mktemp -d /var/tmp/ahe-standin.XXXXXX)
    log "debootstrap $suite (about a minute)" >&2
    if ! debootstrap --variant=minbase --include="$packages" "$suite" "$d/root" "$MIRROR" >"$d/log" 2>&1; then
      tail -20 "$d/log" >&2
      rm -rf "$d"
      return 1
    fi
    rm -rf "$d/root/var/cache/apt/archives/"*.deb "$d/root/var/lib/apt/lists/"*
    tar -C "$d/root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$d"
  fi
  echo "$tarball"
}

# uv and uvx from their PyPI wheel; prints the directory holding both.
uv_bins() {
  local d="$CACHE/uv-$UV"
  if [ ! -x "$d/uvx" ]; then
    local w
    w=$(mktemp -d /var/tmp/ahe-uv.XXXXXX)
    python3 -m pip download -q "uv==$UV" --no-deps --only-binary :all: \
      --platform manylinux_2_17_x86_64 -d "$w" >&2
    mkdir -p "$d"
    python3 - "$w"/uv-*.whl "$d" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        base = os.path.basename(n)
        if "/scripts/" in n and base in ("uv", "uvx"):
            with open(os.path.join(out, base), "wb") as f:
                f.write(z.read(n))
            os.chmod(os.path.join(out, base), 0o755)
PY
    rm -rf "$w"
  fi
  echo "$d"
}

BOOKWORM_PY_LIBS=libbz2-1.0,libffi8,libgdbm6,liblzma5,libncursesw6,libreadline8,libsqlite3-0,libssl3,libuuid1,zlib1g,libexpat1
TRIXIE_PY_LIBS=libbz2-1.0,libffi8,libgdbm6t64,liblzma5,libncursesw6,libreadline8t64,libsqlite3-0,libssl3t64,libuuid1,zlib1g,libexpat1
COMMON=ca-certificates,netbase,tzdata

# CPython $PY313 from Debian's source package, built in a bookworm container with prefix
# /usr/local and a static libpython (so the tree can be moved); prints the tarball's path.
cpython313() {
  local out="$CACHE/cpython-$PY313-bookworm.tar"
  if [ ! -s "$out" ]; then
    local base builder
    base=$(rootfs bookworm "$COMMON")
    builder=ahe-standin-builder:bookworm
    docker image inspect "$builder" >/dev/null 2>&1 || docker import - "$builder" <"$base" >/dev/null
    log "building CPython $PY313 from Debian's source package (5-10 min on 2 cores)" >&2
    local w
    w=$(mktemp -d /var/tmp/ahe-cpython.XXXXXX)
    docker run --rm -v "$w:/out" -e MIRROR="$MIRROR" -e V="$PY313" "$builder" bash -ec '
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends gcc make curl xz-utils libc6-dev \
        libbz2-dev libffi-dev libgdbm-dev liblzma-dev libncursesw5-dev libreadline-dev \
        libsqlite3-dev libssl-dev uuid-dev zlib1g-dev libexpat1-dev >/dev/null
      cd /tmp && curl -fsS "$MIRROR/pool/main/p/python3.13/python3.13_$V.orig.tar.xz" | tar xJ
      cd Python-$V
      ./configure -q --prefix=/usr/local --with-system-expat --without-system-libmpdec \
        --with-ensurepip=install >/dev/null
      make -s -j"$(nproc)" >/dev/null 2>&1
      make -s install DESTDIR=/out/root >/dev/null 2>&1
      cd /out/root/usr/local/bin
      ln -sf python3 python; ln -sf pip3 pip; ln -sf idle3 idle; ln -sf pydoc3 pydoc
      find /out/root -name "__pycache__" -prune -exec rm -rf {} +
      rm -rf /out/root/usr/local/lib/python3.13/test /out/root/usr/local/lib/python3.13/idlelib/idle_test
      tar -C /out/root -cf /out/cpython.tar .
    ' >&2
    mv "$w/cpython.tar" "$out"
    rm -rf "$w"
  fi
  echo "$out"
}

# Unpacks a rootfs tarball, adds the host's CA certificates and uv, and imports it as TAG.
#   make_image TAG ROOTFS_TARBALL EXTRA_FN CMD
make_image() {
  local tag=$1 tarball=$2 extra=$3 cmd=$4 d uvd
  d=$(mktemp -d /var/tmp/ahe-standin-img.XXXXXX)
  tar -C "$d" -xf "$tarball"
  uvd=$(uv_bins)
  install -m 755 "$uvd/uv" "$uvd/uvx" "$d/usr/local/bin/"
  # The TLS proxy's CA (PyPI is reached through it here), kept where update-ca-certificates
  # finds it again when a task reinstalls ca-certificates.
  mkdir -p "$d/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$d/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$d" update-ca-certificates >/dev/null 2>&1 || true
  "$extra" "$d"
  mkdir -p "$d/app"
  local ca=/etc/ssl/certs/ca-certificates.crt
  tar -C "$d" -c . | docker import \
    -c "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    -c "ENV LANG=C.UTF-8" \
    -c "ENV UV_NATIVE_TLS=1 SSL_CERT_FILE=$ca PIP_CERT=$ca REQUESTS_CA_BUNDLE=$ca NODE_EXTRA_CA_CERTS=$ca" \
    -c "LABEL ahe.standin=1 ahe.standin.of=$tag ahe.standin.recipe=$RECIPE" \
    -c "CMD [\"$cmd\"]" - "$tag" >/dev/null
  rm -rf "$d"
}

# What goes into each stand-in beyond its Debian tree.
add_cpython_local() { tar -C "$1" -xf "$(cpython313)"; rm -f "$1/usr/local/lib/python3.13/EXTERNALLY-MANAGED"; }
# Where uv keeps a Python it downloaded (`uvx -p 3.13` finds it there as the real uv would
# after its download): the same build, moved (a static libpython finds its library by its
# own location).
add_cpython_uv() {
  local py="$1/root/.local/share/uv/python/cpython-$PY313-linux-x86_64-gnu" t
  mkdir -p "$py"
  t=$(mktemp -d /var/tmp/ahe-py.XXXXXX)
  tar -C "$t" -xf "$(cpython313)"
  cp -a "$t/usr/local/." "$py/"
  rm -rf "$t"
}
add_ubuntu() {
  add_cpython_uv "$1"
  chroot "$1" useradd -m -u 1000 -s /bin/bash ubuntu 2>/dev/null || true
}
add_debian_python311() {
  # Debian's python3.11 behind the official image's /usr/local names.
  rm -f "$1"/usr/lib/python3.11/EXTERNALLY-MANAGED
  for n in python python3; do ln -sf /usr/bin/python3.11 "$1/usr/local/bin/$n"; done
  for n in pip pip3; do printf '#!/bin/sh\nexec /usr/bin/python3.11 -m pip "$@"\n' >"$1/usr/local/bin/$n"; chmod 755 "$1/usr/local/bin/$n"; done
}
add_python311_full() { add_debian_python311 "$1"; }
# Their verifiers also run `uvx -p 3.13` (uv would download a 3.13 there).
add_python311_uv() { add_debian_python311 "$1"; add_cpython_uv "$1"; }
nothing() { :; }

build() {
  local tag=$1
  case "$tag" in
    python:3.13-slim-bookworm)
      make_image "$tag" "$(rootfs bookworm "$COMMON,$BOOKWORM_PY_LIBS")" add_cpython_local python3 ;;
    ubuntu:24.04)
      make_image "$tag" "$(rootfs trixie "$COMMON,$TRIXIE_PY_LIBS")" add_ubuntu /bin/bash ;;
    debian:13.0-slim)
      make_image "$tag" "$(rootfs trixie "$COMMON,$TRIXIE_PY_LIBS")" add_cpython_uv bash ;;
    python:3.11-slim)
      make_image "$tag" "$(rootfs bookworm "$COMMON,python3.11,python3-pip,python3-venv")" add_python311_uv python3 ;;
    python:3.11)
      make_image "$tag" "$(rootfs bookworm "$COMMON,python3.11,python3-pip,python3-venv,gcc,g++,make,libc6-dev,git,curl,wget,procps,xz-utils")" add_python311_uv python3 ;;
    debian:bullseye-slim)
      make_image "$tag" "$(rootfs bullseye "$COMMON")" nothing bash ;;
    *) echo "tb2-standins: no recipe for '$tag' (known: ${ALL[*]})" >&2; return 2 ;;
  esac
}

status=0
for tag in "${tags[@]}"; do
  t0=$(date +%s)
  if docker image inspect "$tag" >/dev/null 2>&1; then
    is_standin=$(docker image inspect -f '{{index .Config.Labels "ahe.standin"}}' "$tag" 2>/dev/null || true)
    if [ "$is_standin" != 1 ]; then
      log "$tag: a real image is present; left alone"
      continue
    fi
    if [ "$force" = 0 ]; then
      log "$tag: stand-in exists"
      continue
    fi
  fi
  if [ "$pull" = 1 ] && timeout 30 docker pull -q "$tag" >/dev/null 2>&1; then
    log "$tag: pulled the real image; no stand-in needed"
    continue
  fi
  if build "$tag"; then
    log "$tag: stand-in made in $(( $(date +%s) - t0 )) s ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
  else
    log "$tag: FAILED"
    status=1
  fi
done
exit $status
