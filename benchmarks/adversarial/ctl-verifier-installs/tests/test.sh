#!/bin/bash
# Like a Terminal-Bench verifier: installs before the tests (no `set -e`: a failed install,
# e.g. on a read-only /usr, does not stop the tests), then pytest, reward by its status.
w=$(mktemp -d)
mkdir -p "$w/pkg/DEBIAN" "$w/pkg/usr/lib/x86_64-linux-gnu"
printf 'int ahe_ctl_answer(void) { return 42; }\n' > "$w/lib.c"
gcc -shared -fPIC -Wl,-soname,libahectl.so.1 -o "$w/pkg/usr/lib/x86_64-linux-gnu/libahectl.so.1" "$w/lib.c"
printf 'Package: ahectl\nVersion: 1.0\nArchitecture: amd64\nMaintainer: ahe <ahe@localhost>\nDescription: a control library\n' > "$w/pkg/DEBIAN/control"
dpkg-deb --build "$w/pkg" "$w/ahectl.deb" >/dev/null && dpkg -i "$w/ahectl.deb" >/dev/null
ldconfig
# A newer version of a package the image has, over it (pip removes the old files, writes the
# new ones and their RECORD in a new dist-info).
python3 /ahectl/pip_like.py 2.0
# What uvx leaves in its cache: an unpacked package with its own conftest.py and a pytest
# plugin registered by entry point (pytest never loads either from there).
c=/root/.cache/ahe-uv/archive-v0/abc123
mkdir -p "$c/numpyish" "$c/numpyish-1.0.dist-info"
echo 'import pytest' > "$c/numpyish/conftest.py"
printf '[pytest11]\nnumpyish = numpyish.plugin\n' > "$c/numpyish-1.0.dist-info/entry_points.txt"
pytest /tests/test_outputs.py -rA -p no:cacheprovider
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
