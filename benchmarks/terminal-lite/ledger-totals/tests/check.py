with open("/app/totals.txt") as f:
    lines = [l.strip() for l in f.read().strip().splitlines()]
assert lines == ["records=140", "total=222451.68"], f"got {lines}"
print("all checks passed")
