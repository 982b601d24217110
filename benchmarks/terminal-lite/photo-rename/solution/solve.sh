#!/bin/bash
cd /app/photos
for f in IMG_*; do
  if [[ $f =~ ^IMG_([0-9]{4})([0-9]{2})([0-9]{2})_([0-9]+)\.(jpg|JPG)$ ]]; then
    n=$((10#${BASH_REMATCH[4]}))
    new=$(printf '%s-%s-%s_%03d.jpg' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" "$n")
    mv -n -- "$f" "$new"
  fi
done
