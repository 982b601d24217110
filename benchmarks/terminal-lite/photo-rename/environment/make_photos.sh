#!/bin/bash
# Creates /app/photos; each file's content is its original name (so renames can be checked).
set -e
mkdir -p /app/photos
cd /app/photos
for n in IMG_20240131_7.jpg IMG_20240131_12.jpg IMG_20231105_1.JPG IMG_20231105_100.jpg \
         IMG_20220229_3.jpg IMG_20240704_45.JPG "IMG_20240131_8 (copy).jpg" IMG_2024013_1.jpg \
         IMG_20240131_9.png notes.txt img_20240101_2.jpg IMG_20230815_0.jpg; do
  printf '%s\n' "$n" > "$n"
done
