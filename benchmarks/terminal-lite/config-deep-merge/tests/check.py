import json

with open("/app/config/final.json") as f:
    got = json.load(f)
want = {
    "service": {"name": "catalog", "port": 8081, "workers": 8, "tags": ["web", "eu"],
                "timeout_s": 30, "region": "eu-west"},
    "database": {"host": "db.eu.prod.internal", "port": 5432, "pool": {"min": 1, "max": 50},
                 "replica": {"host": "db-ro.eu.prod.internal"}},
    "features": {"search": True, "recommendations": True},
    "cdn": {"enabled": True, "hosts": ["cdn1.example.eu", "cdn2.example.eu"]},
}
assert got == want, f"got:\n{json.dumps(got, indent=1, sort_keys=True)}"
print("all checks passed")
