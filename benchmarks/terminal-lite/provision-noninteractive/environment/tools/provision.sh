#!/bin/bash
# provision.sh: create and seed the application database.
#
# Usage: provision.sh [--yes] [--db PATH]
#   --yes      do not ask for confirmation
#   --db PATH  database file (default /app/data/app.db)
#   --help     show this help
set -euo pipefail

db=/app/data/app.db
assume_yes=0
while [ $# -gt 0 ]; do
  case $1 in
    --yes|-y) assume_yes=1 ;;
    --db) db=$2; shift ;;
    --help|-h) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "provision.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

echo "This will (re)create $db and load the seed data."
if [ "$assume_yes" != 1 ]; then
  while true; do
    printf 'Type "yes" to continue or "no" to abort: '
    if ! read -r answer; then
      # No answer yet (no input available): wait and ask again.
      sleep 2
      continue
    fi
    case $answer in
      yes) break ;;
      no) echo "aborted"; exit 1 ;;
      *) echo "please answer yes or no" ;;
    esac
  done
fi

mkdir -p "$(dirname "$db")"
rm -f "$db"
sqlite3 "$db" <<'SQL'
CREATE TABLE plans (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 37)
INSERT INTO plans (id, name, price_cents) SELECT i, 'plan-' || i, i * 250 FROM n;
INSERT INTO meta VALUES ('provisioned_by', 'provision.sh');
INSERT INTO meta VALUES ('schema', '3');
SQL
sum=$(sqlite3 "$db" 'SELECT sum(price_cents * id) FROM plans;')
sqlite3 "$db" "INSERT INTO meta VALUES ('checksum', '$sum');"
echo "provisioned $db"
