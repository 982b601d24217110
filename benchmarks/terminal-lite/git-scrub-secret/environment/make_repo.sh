#!/bin/bash
# Builds /app/service: a history in which a live API token was committed (and later partly removed).
set -euo pipefail
mkdir -p /app/service && cd /app/service
export GIT_AUTHOR_NAME="Kim Lee" GIT_AUTHOR_EMAIL="kim@example.org"
export GIT_COMMITTER_NAME="Kim Lee" GIT_COMMITTER_EMAIL="kim@example.org"
TOKEN=sk_live_4c9a1f07e2b85d36a0f19c7e52b84d3f
n=0
commit() {
  n=$((n + 1))
  export GIT_AUTHOR_DATE="$((1704067200 + n * 86400)) +0000" GIT_COMMITTER_DATE="$((1704067200 + n * 86400)) +0000"
  git add -A && git -c commit.gpgsign=false commit -q -m "$1"
}
git init -q -b main
printf 'import os\n\n\ndef token():\n    return os.environ["API_TOKEN"]\n' > app.py
printf '# service\n\nTalks to the payments API.\n' > README.md
commit "Initial service"
mkdir -p config
printf 'DB_HOST=db.internal\nDB_PORT=5432\n' > config/prod.env
commit "Add production config"
printf 'API_TOKEN=%s\n' "$TOKEN" >> config/prod.env
commit "Configure API token"
printf '#!/bin/bash\n# deploy with: API_TOKEN=%s ./deploy.sh\nscp -r . deploy@prod:/srv/service\n' "$TOKEN" > deploy.sh
commit "Add deploy script"
printf '\nDeploy with ./deploy.sh.\n' >> README.md
commit "Document deployment"
git -c tag.gpgsign=false tag -a v1.0 -m "Release 1.0"
printf '#!/bin/bash\nscp -r . deploy@prod:/srv/service\n' > deploy.sh
commit "Remove token from deploy script comment"
git branch release
printf 'LOG_LEVEL=info\n' >> config/prod.env
commit "Add log level"
printf '\n\ndef health():\n    return "ok"\n' >> app.py
commit "Add health check"
git checkout -q release
n=20
printf 'LOG_LEVEL=warn\n' >> config/prod.env
commit "Release: quieter logs"
git checkout -q main
