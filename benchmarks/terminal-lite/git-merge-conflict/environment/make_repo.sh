#!/bin/bash
# Builds /app/shop: branch main and branch feature/retries that conflict in settings.ini.
# Fixed author, committer and dates: every commit hash is the same on every build.
set -euo pipefail
mkdir -p /app/shop && cd /app/shop
export GIT_AUTHOR_NAME="Sam Ops" GIT_AUTHOR_EMAIL="sam@example.org"
export GIT_COMMITTER_NAME="Sam Ops" GIT_COMMITTER_EMAIL="sam@example.org"
n=0
commit() {
  n=$((n + 1))
  export GIT_AUTHOR_DATE="$((1710000000 + n * 600)) +0000" GIT_COMMITTER_DATE="$((1710000000 + n * 600)) +0000"
  git add -A && git -c commit.gpgsign=false commit -q -m "$1"
}
git init -q -b main
cat > settings.ini <<'INI'
[server]
host = 0.0.0.0
port = 8080
timeout = 30

[client]
user_agent = shop/1.0
INI
printf 'def fetch(url):\n    return url\n' > client.py
commit "Initial settings"

git checkout -q -b feature/retries
sed -i 's/^timeout = 30$/timeout = 45\nretries = 3/' settings.ini
commit "Retry failed requests"
sed -i 's#^user_agent = shop/1.0$#user_agent = shop/1.1#' settings.ini
printf 'def with_retries(fn, n=3):\n    for _ in range(n - 1):\n        try:\n            return fn()\n        except OSError:\n            pass\n    return fn()\n' > retry.py
commit "Add retry helper and bump user agent"

git checkout -q main
sed -i 's/^port = 8080$/port = 8081/; s/^timeout = 30$/timeout = 60/' settings.ini
commit "Move to port 8081, longer timeout"
printf '\n[logging]\nlevel = info\n' >> settings.ini
commit "Add logging section"
