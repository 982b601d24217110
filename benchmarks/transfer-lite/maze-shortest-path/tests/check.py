from collections import deque

with open("/tests/maze.txt") as f:  # a pristine copy of /app/maze.txt
    grid = [l.rstrip("\n") for l in f if l.strip()]
pos = {c: (x, y) for y, row in enumerate(grid) for x, c in enumerate(row) if c in "SE"}
start, end = pos["S"], pos["E"]
dist = {start: 0}
q = deque([start])
while q:
    x, y = q.popleft()
    for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        n = (x + dx, y + dy)
        if grid[n[1]][n[0]] != "#" and n not in dist:
            dist[n] = dist[(x, y)] + 1
            q.append(n)
best = dist[end]

with open("/app/route.txt") as f:
    route = f.read().strip()
assert route and set(route) <= set("UDLR"), f"route must be a line of U/D/L/R letters: {route[:80]!r}"
x, y = start
for i, m in enumerate(route):
    dx, dy = {"U": (0, -1), "D": (0, 1), "L": (-1, 0), "R": (1, 0)}[m]
    x, y = x + dx, y + dy
    assert grid[y][x] != "#", f"move {i + 1} ({m}) walks into a wall at column {x}, row {y}"
assert (x, y) == end, f"the route ends at column {x}, row {y}, not at E"
assert len(route) == best, f"the route has {len(route)} moves; the shortest has {best}"
print("all checks passed")
