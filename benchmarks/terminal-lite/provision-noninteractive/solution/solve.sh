#!/bin/bash
set -e
# Without --yes the script waits for an answer forever when no input is available.
/app/tools/provision.sh --yes
sqlite3 /app/data/app.db 'SELECT count(*) FROM plans;' > /app/plans_count.txt
