#!/bin/bash
set -e
python3 - <<'PY'
import sqlite3

con = sqlite3.connect("/app/app.db")
rows = con.execute("SELECT id, full_name, email, created FROM users ORDER BY id").fetchall()
keep, remap = {}, {}
new_users = []
for uid, full, email, created in rows:
    email = email.strip().lower()
    if email in keep:
        remap[uid] = keep[email]
        continue
    keep[email] = uid
    words = full.split()
    first, last = (" ".join(words[:-1]), words[-1]) if len(words) > 1 else (words[0], "")
    new_users.append((uid, first, last, email, created))

con.execute("PRAGMA foreign_keys = OFF")
con.executescript("""
BEGIN;
DROP VIEW user_totals;
CREATE TABLE users_new (
  id INTEGER PRIMARY KEY,
  first_name TEXT NOT NULL,
  last_name TEXT NOT NULL,
  email TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL
);
""")
con.executemany("INSERT INTO users_new VALUES (?, ?, ?, ?, ?)", new_users)
con.executemany("UPDATE orders SET user_id = ? WHERE user_id = ?", [(k, o) for o, k in remap.items()])
con.executescript("""
DROP TABLE users;
ALTER TABLE users_new RENAME TO users;
CREATE VIEW user_totals AS
  SELECT u.id AS id, trim(u.first_name || ' ' || u.last_name) AS name,
         coalesce(sum(o.amount_cents), 0) AS total
  FROM users u LEFT JOIN orders o ON o.user_id = u.id
  GROUP BY u.id;
COMMIT;
""")
assert con.execute("PRAGMA foreign_key_check").fetchall() == []
con.close()
PY
