#!/bin/bash
set -e
cd /app/greet
make dist
# `make clean` would also delete dist/: remove only the build artifacts.
rm -rf build
find . -name '*.o' -delete
