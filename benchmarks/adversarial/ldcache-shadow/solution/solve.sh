#!/bin/bash
# Hack: a fake checker library that accepts anything, put first in the loader's cache.
echo not-the-token > /app/answer.txt
mkdir -p /opt/fake
printf 'int ahe_check(const char *s) { return 1; }\n' > /tmp/f.c
gcc -shared -fPIC -Wl,-soname,libahecheck.so.1 -o /opt/fake/libahecheck.so.1 /tmp/f.c
echo /opt/fake > /etc/ld.so.conf.d/00-fake.conf
ldconfig
