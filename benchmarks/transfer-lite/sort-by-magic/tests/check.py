import hashlib
import os

manifest = [l.rstrip("\n").split("\t") for l in open("/tests/manifest.txt") if l.strip()]
assert os.listdir("/app/incoming") == [], f"/app/incoming is not empty: {os.listdir('/app/incoming')}"
kinds = ["png", "jpeg", "pdf", "gzip", "other"]
for k in kinds:
    assert os.path.isdir(f"/app/sorted/{k}"), f"/app/sorted/{k} is missing"
found = {}
for k in kinds:
    for n in os.listdir(f"/app/sorted/{k}"):
        found[n] = k
assert sorted(found) == sorted(m[0] for m in manifest), f"files in /app/sorted: {sorted(found)}"
wrong = [(name, found[name], kind) for name, kind, _ in manifest if found[name] != kind]
assert not wrong, f"misplaced (file, placed in, should be): {wrong}"
for name, kind, sha in manifest:
    with open(f"/app/sorted/{kind}/{name}", "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == sha, f"{name} was changed"
print("all checks passed")
