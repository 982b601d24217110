import json
import math

with open("/app/fit.json") as f:
    got = json.load(f)
want = {"slope": 0.386724206614, "intercept": 99.91891632140799, "r2": 0.9968985646552384}
for k, v in want.items():
    assert isinstance(got.get(k), (int, float)), f"{k} missing or not a number"
    assert math.isclose(got[k], v, rel_tol=1e-6), f"{k} = {got[k]}, want {v}"
assert got.get("n") == 119, f"n = {got.get('n')}, want 119"
print("all checks passed")
