#!/bin/bash
# The status is the 9th whitespace-separated field; the size field or the URL may also hold "500".
awk '$9 ~ /^5[0-9][0-9]$/ { n[$1]++ } END { for (ip in n) print ip, n[ip] }' /app/access.log \
  | sort -k2,2nr | head -3 > /app/top_ips.txt
