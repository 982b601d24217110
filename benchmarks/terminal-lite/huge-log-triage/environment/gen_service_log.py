"""Writes /app/logs/service.log: 60,000 deterministic structured log lines."""
import os
import random

rng = random.Random(777)
services = ["api", "auth", "billing", "payments", "search", "worker"]
msgs = {
    "INFO": ["request served", "cache hit", "cache miss", "job done", "token refreshed"],
    "WARN": ["slow upstream", "retrying request", "queue depth high", "retry after level=ERROR"],
    "ERROR": ["upstream timeout", "db deadlock", "invalid payload", "connection reset"],
}
os.makedirs("/app/logs", exist_ok=True)
N = 60000
fatal_at = 41234
slow_at = 17771
with open("/app/logs/service.log", "w") as f:
    for i in range(N):
        t = 1710403200 + i * 3
        ts = "2024-03-14T%02d:%02d:%02d.%03dZ" % ((t // 3600) % 24, (t // 60) % 60, t % 60, i % 1000)
        req = "r-%06d" % rng.randint(0, 999999)
        svc = rng.choice(services)
        level = rng.choices(["INFO", "WARN", "ERROR"], [90, 7, 3])[0]
        lat = rng.randint(1, 2500)
        msg = rng.choice(msgs[level])
        if i == fatal_at:
            level, svc, req, msg = "FATAL", "billing", "r-424242", "ledger corrupted; shutting down"
        if i == slow_at:
            svc, req, lat, level, msg = "payments", "r-031337", 9731, "WARN", "slow upstream"
        f.write(f'{ts} level={level} svc={svc} req={req} latency_ms={lat} msg="{msg}"\n')
