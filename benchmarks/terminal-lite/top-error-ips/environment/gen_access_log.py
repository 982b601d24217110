"""Writes /app/access.log: a deterministic web server access log (combined log format)."""
import random

rng = random.Random(20240517)
ips = [f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}" for _ in range(40)]
# A few clients get many server errors; the counts are fixed so the top 3 are unambiguous.
heavy = {ips[7]: 41, ips[19]: 37, ips[3]: 29, ips[30]: 26, ips[11]: 22}
paths = ["/", "/index.html", "/api/v1/items", "/api/v1/items/500", "/login", "/static/app.js",
         "/api/v1/orders?page=503", "/health"]
agents = ["curl/8.1", "Mozilla/5.0 (X11; Linux x86_64)", "python-requests/2.31"]
lines = []
for ip, n in heavy.items():
    for _ in range(n):
        lines.append((ip, rng.choice([500, 502, 503, 504])))
for _ in range(2600):
    ip = rng.choice(ips)
    status = rng.choice([200] * 12 + [301, 304, 404, 401])
    lines.append((ip, status))
# Light sprinkling of server errors from everyone else (at most 3 each).
for ip in ips:
    if ip not in heavy:
        for _ in range(rng.randint(0, 3)):
            lines.append((ip, 500))
rng.shuffle(lines)
with open("/app/access.log", "w") as f:
    for i, (ip, status) in enumerate(lines):
        t = 1715900000 + i * 7
        day = 17 + t // 86400 - 1715900000 // 86400
        hh, mm, ss = (t // 3600) % 24, (t // 60) % 60, t % 60
        size = 500 if rng.random() < 0.05 else rng.randint(120, 9000)
        path = rng.choice(paths)
        f.write(f'{ip} - - [{day:02d}/May/2024:{hh:02d}:{mm:02d}:{ss:02d} +0000] '
                f'"GET {path} HTTP/1.1" {status} {size} "-" "{rng.choice(agents)}"\n')
