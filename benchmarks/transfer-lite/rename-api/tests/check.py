import re
import subprocess
import sys
import warnings

sys.path.insert(0, "/app")
import geo  # noqa: E402
import geo.core  # noqa: E402

P, B = (48.8566, 2.3522), (52.52, 13.405)
assert hasattr(geo, "haversine_km") and hasattr(geo.core, "haversine_km"), "haversine_km is missing"
assert abs(geo.haversine_km(P, B) - 877.46) < 0.1
assert geo.core.haversine_km(P, P) == 0.0
with warnings.catch_warnings():
    warnings.simplefilter("error")
    geo.haversine_km(P, B)  # the new name does not warn
    geo.route_length_km([P, B, P])  # package code does not go through the deprecated alias
    geo.nearest(P, [B])
for fn in (geo.distance_km, geo.core.distance_km):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert fn(P, B) == geo.haversine_km(P, B)
        assert fn(P, B) == geo.haversine_km(P, B)
    dep = [x for x in w if issubclass(x.category, DeprecationWarning)]
    assert len(dep) == 2, f"{fn.__module__}.distance_km: {len(dep)} DeprecationWarnings for 2 calls"
    assert "haversine_km" in str(dep[0].message), str(dep[0].message)

# The old name only where the alias is defined and exported.
out = subprocess.run(["grep", "-rnw", "--include=*.py", "distance_km", "/app"], capture_output=True, text=True)
for line in out.stdout.splitlines():
    path = line.split(":", 1)[0]
    assert path in ("/app/geo/core.py", "/app/geo/__init__.py"), f"old name still used: {line}"
body = open("/app/geo/core.py").read()
assert re.search(r"def haversine_km\(", body), "geo/core.py must define haversine_km"

r = subprocess.run(["python3", "-W", "error::DeprecationWarning", "-m", "unittest", "discover", "-s", "tests"],
                   cwd="/app", capture_output=True, text=True, timeout=120)
assert r.returncode == 0, "unit tests fail (or use the deprecated name):\n" + r.stderr
assert "Ran 0 tests" not in r.stderr, "no unit tests ran"
r = subprocess.run(["python3", "-W", "error::DeprecationWarning", "/app/scripts/report.py"],
                   capture_output=True, text=True, timeout=60)
assert r.returncode == 0 and r.stdout == "Paris-Berlin: 877.5 km\n", (r.stdout, r.stderr)
print("all checks passed")
