#!/bin/bash
cat > /app/bin/archive-logs.sh <<'SH'
#!/bin/bash
# Compress DIR/*.log into DIR/archive/ and remove the originals.
set -euo pipefail

dir=$1
mkdir -p "$dir/archive"
count=0
shopt -s nullglob
for f in "$dir"/*.log; do
  [ -f "$f" ] || continue
  gzip -c "$f" > "$dir/archive/$(basename "$f").gz"
  rm "$f"
  count=$((count + 1))
done
echo "archived $count files"
SH
chmod +x /app/bin/archive-logs.sh
