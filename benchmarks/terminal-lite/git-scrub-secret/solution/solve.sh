#!/bin/bash
set -e
cd /app/service
TOKEN=sk_live_4c9a1f07e2b85d36a0f19c7e52b84d3f
export FILTER_BRANCH_SQUELCH_WARNING=1
git filter-branch -f \
  --tree-filter "grep -rlF --exclude-dir=.git '$TOKEN' . | xargs -r sed -i 's/$TOKEN/REDACTED/g'" \
  --tag-name-filter cat -- --all
git for-each-ref --format='%(refname)' refs/original/ | while read -r ref; do git update-ref -d "$ref"; done
git reflog expire --expire=now --all
git gc --prune=now -q
git checkout -q main
