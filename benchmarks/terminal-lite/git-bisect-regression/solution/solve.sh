#!/bin/bash
set -e
cd /app/repo
first=$(git rev-list --max-parents=0 main)
git bisect start main "$first" >/dev/null
git bisect run bash /app/check.sh > /tmp/bisect.log 2>&1
bad=$(git rev-parse refs/bisect/bad)
git bisect reset >/dev/null 2>&1
echo "$bad" > /app/first_bad.txt
git checkout -q main
git revert --no-edit "$bad"
