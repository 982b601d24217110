import csv

with open("/app/top_customers.csv", newline="") as f:
    rows = list(csv.reader(f))
rows = [r for r in rows if r]
want = [["name", "total"], ["Ivo I.", "7614.82"], ["Eli E.", "6760.08"], ["Dara D.", "6735.89"],
        ["Kai K.", "6661.28"], ["Gus G.", "6013.07"]]
assert [[c.strip() for c in r] for r in rows] == want, f"got {rows}"
print("all checks passed")
