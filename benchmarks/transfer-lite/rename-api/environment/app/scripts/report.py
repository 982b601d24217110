"""Prints the distance between two cities."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import geo  # noqa: E402

PARIS, BERLIN = (48.8566, 2.3522), (52.52, 13.405)
print(f"Paris-Berlin: {geo.distance_km(PARIS, BERLIN):.1f} km")
