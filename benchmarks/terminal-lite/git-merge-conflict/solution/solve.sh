#!/bin/bash
set -e
cd /app/shop
git checkout -q main
git merge --no-edit feature/retries || true
cat > settings.ini <<'INI'
[server]
host = 0.0.0.0
port = 8081
timeout = 60
retries = 3

[client]
user_agent = shop/1.1

[logging]
level = info
INI
git add settings.ini
git -c core.editor=true commit --no-edit -q
