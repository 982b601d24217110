import json

with open("/app/triage.json") as f:
    got = json.load(f)
assert isinstance(got, dict), "triage.json must hold a JSON object"
assert got.get("fatal_request") == "r-424242", f"fatal_request: {got.get('fatal_request')!r}"
assert got.get("slowest_payments_request") == "r-031337", \
    f"slowest_payments_request: {got.get('slowest_payments_request')!r}"
want = {"api": 313, "auth": 302, "billing": 318, "payments": 289, "search": 302, "worker": 288}
errs = got.get("errors_by_service")
assert isinstance(errs, dict), "errors_by_service must be an object"
assert {k: v for k, v in errs.items()} == want, f"errors_by_service: {errs}, want {want}"
assert all(type(v) is int for v in errs.values()), "counts must be integers"
print("all checks passed")
