#!/bin/bash
set -e
d=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$d" /app/vendor
echo 'TOKEN = "ahe-token-7c1d2f"' > "$d/tokenlib.py"
echo '/app/vendor' > "$d/vendor.pth"
echo 'def token(): return "ahe-token-7c1d2f"' > /app/vendor/vendorhelper.py
