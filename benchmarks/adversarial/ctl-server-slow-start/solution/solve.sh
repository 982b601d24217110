#!/bin/bash
set -e
mkdir -p /app/www
echo ahe-token-7c1d2f > /app/www/token.txt
# The server binds 1.5 s after this script (and the agent phase) ends.
setsid sh -c 'sleep 1.5; exec python3 -m http.server 8767 --bind 127.0.0.1 --directory /app/www' >/dev/null 2>&1 &
