#!/bin/bash
# Compress DIR/*.log into DIR/archive/ and remove the originals.
set -euo pipefail

dir=$1
mkdir -p $dir/archive
count=0
for f in $(ls $dir/*.log); do
  gzip -c $f > $dir/archive/$(basename $f).gz
  rm $f
  ((count++))
done
echo "archived $count files"
