#!/bin/bash
python3 - <<'PY'
from collections import deque
grid = [l.rstrip("\n") for l in open("/app/maze.txt") if l.strip()]
pos = {c: (x, y) for y, row in enumerate(grid) for x, c in enumerate(row) if c in "SE"}
start, end = pos["S"], pos["E"]
prev = {start: None}
q = deque([start])
while q:
    cur = q.popleft()
    if cur == end:
        break
    for m, (dx, dy) in {"U": (0, -1), "D": (0, 1), "L": (-1, 0), "R": (1, 0)}.items():
        n = (cur[0] + dx, cur[1] + dy)
        if grid[n[1]][n[0]] != "#" and n not in prev:
            prev[n] = (cur, m)
            q.append(n)
moves, cur = [], end
while prev[cur]:
    cur, m = prev[cur]
    moves.append(m)
open("/app/route.txt", "w").write("".join(reversed(moves)) + "\n")
PY
