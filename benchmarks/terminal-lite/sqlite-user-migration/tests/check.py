import shutil
import sqlite3
import tempfile

DB = "/app/app.db"
con = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
cols = [(r[1], r[2].upper(), r[3], r[5]) for r in con.execute("PRAGMA table_info(users)")]
want_cols = [("id", "INTEGER", 0, 1), ("first_name", "TEXT", 1, 0), ("last_name", "TEXT", 1, 0),
             ("email", "TEXT", 1, 0), ("created_at", "TEXT", 1, 0)]
assert cols == want_cols, f"users columns (name, type, notnull, pk): {cols}"
unique_email = any(
    r[2] and [c[2] for c in con.execute(f"PRAGMA index_info('{r[1]}')")] == ["email"]
    for r in con.execute("PRAGMA index_list(users)"))
assert unique_email, "users.email is not UNIQUE"

users = con.execute("SELECT id, first_name, last_name, email, created_at FROM users ORDER BY id").fetchall()
want_users = [
    (1, "Ada", "Lovelace", "ada@example.org", "2023-01-05"),
    (2, "Bob", "Stone", "bob@example.com", "2023-02-11"),
    (3, "Mary Ann", "Smith", "mary.smith@example.com", "2023-02-12"),
    (4, "Cher", "", "cher@example.net", "2023-03-01"),
    (5, "José", "García", "jose@example.es", "2023-03-15"),
    (7, "Li", "Wei", "li.wei@example.cn", "2023-04-20"),
    (9, "Jean-Luc", "Picard", "jl@example.fr", "2023-06-30"),
    (11, "Ludwig van", "Beethoven", "lvb@example.de", "2023-08-18"),
    (12, "Zed", "", "zed@example.org", "2023-09-09"),
]
assert users == want_users, f"users: {users}"

orders = con.execute("SELECT id, user_id, amount_cents FROM orders ORDER BY id").fetchall()
want_orders = [(100, 1, 1500), (101, 2, 2500), (102, 2, 700), (103, 3, 1200), (104, 3, 800),
               (105, 1, 9900), (106, 5, 450), (107, 2, 300), (108, 9, 12000), (109, 11, 60),
               (110, 7, 5000), (111, 4, 100), (112, 3, 40), (113, 2, 1), (114, 12, 999)]
assert orders == want_orders, f"orders: {orders}"
ocols = [r[1] for r in con.execute("PRAGMA table_info(orders)")]
assert ocols == ["id", "user_id", "amount_cents"], ocols
fks = [(r[2], r[3], r[4]) for r in con.execute("PRAGMA foreign_key_list(orders)")]
assert fks == [("users", "user_id", "id")], f"orders foreign keys: {fks}"
idx = {r[1]: [c[2] for c in con.execute(f"PRAGMA index_info('{r[1]}')")]
       for r in con.execute("PRAGMA index_list(orders)")}
assert idx.get("orders_user_idx") == ["user_id"], f"orders indexes: {idx}"
assert con.execute("PRAGMA foreign_key_check").fetchall() == [], "foreign_key_check reports problems"
assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

view = con.execute("SELECT id, name, total FROM user_totals ORDER BY id").fetchall()
want_view = [(1, "Ada Lovelace", 11400), (2, "Bob Stone", 3501), (3, "Mary Ann Smith", 2040),
             (4, "Cher", 100), (5, "José García", 450), (7, "Li Wei", 5000),
             (9, "Jean-Luc Picard", 12000), (11, "Ludwig van Beethoven", 60), (12, "Zed", 999)]
assert view == want_view, f"user_totals: {view}"
con.close()

# UNIQUE and NOT NULL are enforced (on a copy).
tmp = tempfile.mktemp(suffix=".db")
shutil.copy(DB, tmp)
c2 = sqlite3.connect(tmp)
for sql in ["INSERT INTO users VALUES (50, 'A', 'B', 'ada@example.org', '2024-01-01')",
            "INSERT INTO users VALUES (51, NULL, 'B', 'new@example.org', '2024-01-01')",
            "INSERT INTO users VALUES (52, 'A', 'B', 'new2@example.org', NULL)"]:
    try:
        c2.execute(sql)
    except sqlite3.IntegrityError:
        continue
    raise AssertionError(f"constraint not enforced: {sql}")
print("all checks passed")
