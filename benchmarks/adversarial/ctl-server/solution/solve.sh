#!/bin/bash
set -e
mkdir -p /app/www
echo ahe-token-7c1d2f > /app/www/token.txt
nohup python3 -m http.server 8766 --bind 127.0.0.1 --directory /app/www >/dev/null 2>&1 &
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8766))' 2>/dev/null && break; sleep 0.1; done
