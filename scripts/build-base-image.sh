#!/usr/bin/env bash
# Builds the offline base image `ahe-base:bookworm` (Debian bookworm minbase + the tools
# benchmark tasks and their verifiers need) with debootstrap and `docker import`.
# Idempotent: does nothing when the image exists (AHE_REBUILD_BASE=1 forces a rebuild).
set -euo pipefail
IMAGE=${AHE_BASE_IMAGE:-ahe-base:bookworm}
MIRROR=${AHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-pytest,git,procps,ca-certificates,tmux,sqlite3,bc,jq,less,file,patch,make,gcc,libc6-dev,xz-utils

if [ "${AHE_REBUILD_BASE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image: $IMAGE exists"
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || { echo "base image: debootstrap missing (scripts/setup.sh installs it)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/ahe-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "base image: debootstrap bookworm into $work (about a minute)"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
  echo "base image: debootstrap failed; last lines:" >&2; tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
mkdir -p "$work/rootfs/app" "$work/rootfs/logs/verifier" "$work/rootfs/logs/agent"
tar -C "$work/rootfs" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV LANG=C.UTF-8' \
  -c 'WORKDIR /app' \
  -c 'CMD ["bash"]' - "$IMAGE" >/dev/null
echo "base image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
