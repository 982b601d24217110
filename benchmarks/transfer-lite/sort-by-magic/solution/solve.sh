#!/bin/bash
set -e
cd /app
mkdir -p sorted/png sorted/jpeg sorted/pdf sorted/gzip sorted/other
for f in incoming/* incoming/.[!.]*; do
  [ -f "$f" ] || continue
  magic=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
  case $magic in
    89504e470d0a1a0a*) k=png ;;
    ffd8ff*) k=jpeg ;;
    255044462d*) k=pdf ;;
    1f8b*) k=gzip ;;
    *) k=other ;;
  esac
  mv -- "$f" "sorted/$k/"
done
