#!/bin/bash
set -e
mkdir -p /app/lib
printf 'int ahe_mine(void) { return 7; }\n' > /tmp/mine.c
gcc -shared -fPIC -Wl,-soname,libahemine.so.1 -o /app/lib/libahemine.so.1 /tmp/mine.c
# Registering needs a writable /etc (the local backend's is the host's, read-only): the tests
# then load it by path.
{ echo /app/lib > /etc/ld.so.conf.d/ahe-mine.conf && ldconfig; } 2>/dev/null || true
