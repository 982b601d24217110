#!/bin/bash
cat > /app/backup.sh <<'SH'
#!/bin/bash
# backup.sh SRC_DIR DEST_DIR: archive SRC_DIR as DEST_DIR/NAME.tar.gz, keeping one previous copy.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: backup.sh SRC_DIR DEST_DIR" >&2
  exit 2
fi
src=${1%/}
dest=${2%/}
[ -n "$src" ] || src=/
if [ ! -d "$src" ]; then
  echo "backup.sh: $1 is not a directory" >&2
  exit 2
fi
name=$(basename "$src")
parent=$(dirname "$src")
mkdir -p "$dest"
archive="$dest/$name.tar.gz"
if [ -e "$archive" ]; then
  mv -f "$archive" "$dest/$name.1.tar.gz"
fi
tar -C "$parent" --exclude='*.tmp' --exclude='.cache' -czf "$archive" "$name"
echo "$archive"
SH
chmod +x /app/backup.sh
