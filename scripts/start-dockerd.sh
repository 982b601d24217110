#!/usr/bin/env bash
# Starts dockerd in the background when no Docker engine answers (idempotent).
set -euo pipefail
if docker info >/dev/null 2>&1; then
  echo "dockerd: an engine already answers"
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "dockerd: not installed (scripts/setup.sh installs docker.io)" >&2
  exit 1
fi
log=${AHE_DOCKERD_LOG:-/var/log/ahe-dockerd.log}
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd: started (log: $log)"
    exit 0
  fi
  sleep 0.5
done
echo "dockerd: did not answer within 30 s; last log lines:" >&2
tail -20 "$log" >&2
exit 1
