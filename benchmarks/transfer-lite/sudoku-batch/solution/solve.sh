#!/bin/bash
python3 - <<'PY'
def solve(g):
    try:
        i = g.index(0)
    except ValueError:
        return True
    r, c = divmod(i, 9)
    used = {g[r * 9 + k] for k in range(9)} | {g[k * 9 + c] for k in range(9)} | \
        {g[(r // 3 * 3 + a) * 9 + c // 3 * 3 + b] for a in range(3) for b in range(3)}
    for d in range(1, 10):
        if d not in used:
            g[i] = d
            if solve(g):
                return True
    g[i] = 0
    return False

out = []
for line in open("/app/puzzles.txt"):
    if line.strip():
        g = [int(ch) for ch in line.strip()]
        assert solve(g)
        out.append("".join(map(str, g)))
open("/app/solutions.txt", "w").write("\n".join(out) + "\n")
PY
