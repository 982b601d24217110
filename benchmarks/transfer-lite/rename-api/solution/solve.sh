#!/bin/bash
set -e
cd /app
sed -i 's/\bdistance_km\b/haversine_km/g' geo/routes.py geo/nearby.py scripts/report.py tests/test_geo.py
python3 - <<'PY'
p = "/app/geo/core.py"
s = open(p).read()
s = s.replace('import math\n', 'import math\nimport warnings\n', 1)
s = s.replace("def distance_km(a, b):", "def haversine_km(a, b):")
s += '''

def distance_km(a, b):
    """Deprecated: use haversine_km."""
    warnings.warn("distance_km is deprecated; use haversine_km", DeprecationWarning, stacklevel=2)
    return haversine_km(a, b)
'''
open(p, "w").write(s)
p = "/app/geo/__init__.py"
s = open(p).read()
s = s.replace("from .core import EARTH_RADIUS_KM, distance_km",
              "from .core import EARTH_RADIUS_KM, distance_km, haversine_km")
s = s.replace('"distance_km",', '"distance_km", "haversine_km",')
open(p, "w").write(s)
PY
python3 -m unittest discover -s tests
