with open("/tests/puzzles.txt") as f:
    puzzles = [l.strip() for l in f if l.strip()]
with open("/app/solutions.txt") as f:
    sols = [l.strip() for l in f if l.strip()]
assert len(sols) == len(puzzles), f"{len(sols)} solutions for {len(puzzles)} puzzles"
for n, (p, s) in enumerate(zip(puzzles, sols), 1):
    assert len(s) == 81 and s.isdigit() and "0" not in s, f"solution {n} is not 81 digits 1-9"
    assert all(a == "0" or a == b for a, b in zip(p, s)), f"solution {n} changes a given digit"
    g = [s[r * 9:(r + 1) * 9] for r in range(9)]
    units = [set(row) for row in g] + [set(g[r][c] for r in range(9)) for c in range(9)] + \
        [set(g[r][c] for r in range(br, br + 3) for c in range(bc, bc + 3))
         for br in (0, 3, 6) for bc in (0, 3, 6)]
    assert all(len(u) == 9 for u in units), f"solution {n} breaks a row, column or box"
print("all checks passed")
