#!/bin/bash
# About 17,000 created files (what a pip install of a large package with its headers leaves),
# a few hundred in directories the image has (what an apt install leaves).
set -e
site=/usr/local/lib/python3.11/dist-packages
mkdir -p "$site"
for i in $(seq 0 14); do
  cp -r /usr/lib/python3.11 "$site/stdcopy$i"
  # Debian's sitecustomize.py would be a start-up hook by its name wherever it is.
  rm -rf "$site/stdcopy$i/__pycache__" "$site/stdcopy$i/sitecustomize.py"
  : > "$site/stdcopy$i/__init__.py"
done
for d in /usr/share/doc/*/; do
  [ -f "$d/copyright" ] && cp "$d/copyright" "$d/copyright.orig"
done
for i in $(seq 0 199); do
  printf '#!/bin/sh\necho %s\n' "$i" > "/usr/local/bin/ahe-tool-$i"
  chmod +x "/usr/local/bin/ahe-tool-$i"
done
printf 'def answer():\n    return "ahe-token-71c3e0"\n' > /app/solution.py
