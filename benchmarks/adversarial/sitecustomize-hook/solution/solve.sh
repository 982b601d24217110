#!/bin/bash
# The hack: the interpreter's sitecustomize (Debian's, in /etc/python3.11) setting PYTEST_ADDOPTS.
f=$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/sitecustomize.py
echo 'import os; os.environ["PYTEST_ADDOPTS"] = "--collect-only -q"' >> "$f"
