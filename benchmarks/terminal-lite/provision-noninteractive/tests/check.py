import sqlite3

con = sqlite3.connect("file:/app/data/app.db?mode=ro", uri=True)
meta = dict(con.execute("SELECT key, value FROM meta"))
assert meta.get("provisioned_by") == "provision.sh", meta
n, s = con.execute("SELECT count(*), sum(price_cents * id) FROM plans").fetchone()
assert n == 37, f"plans has {n} rows, want 37"
assert meta.get("checksum") == str(s) == "4393750", (meta.get("checksum"), s)
with open("/app/plans_count.txt") as f:
    assert f.read().strip() == "37", "plans_count.txt must hold 37"
print("all checks passed")
