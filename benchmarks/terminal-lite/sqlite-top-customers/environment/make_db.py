"""Creates /app/shop.db: customers and orders (deterministic)."""
import random
import sqlite3

rng = random.Random(2024)
con = sqlite3.connect("/app/shop.db")
con.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  ordered_at TEXT NOT NULL,          -- ISO 8601, UTC
  status TEXT NOT NULL,              -- paid | shipped | refunded | cancelled
  total_cents INTEGER NOT NULL
);
""")
first = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jon", "Kai", "Lea",
         "Mo", "Nia", "Oto", "Pia", "Quin", "Rui", "Sol", "Tea"]
for i, n in enumerate(first, 1):
    con.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, f"{n} {chr(64 + i)}.", rng.choice(["DE", "FR", "US", "JP"])))
oid = 0
for _ in range(600):
    oid += 1
    cid = rng.randint(1, 20)
    year = rng.choice([2023, 2024, 2024, 2025])
    ts = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
    status = rng.choices(["paid", "shipped", "refunded", "cancelled"], [5, 4, 2, 1])[0]
    con.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (oid, cid, ts, status, rng.randint(500, 90000)))
# Big refunded / 2023 / 2025 orders that a careless query would count.
for cid, ts, status, cents in [(3, "2024-05-01T10:00:00Z", "refunded", 900000),
                               (7, "2023-12-31T23:00:00Z", "paid", 800000),
                               (11, "2025-01-01T00:00:00Z", "shipped", 700000),
                               (15, "2024-07-07T07:00:00Z", "cancelled", 650000)]:
    oid += 1
    con.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", (oid, cid, ts, status, cents))
con.commit()
