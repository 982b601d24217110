"""Nearest-point search."""
from . import core


def nearest(origin, candidates):
    """The candidate (lat, lon) closest to origin."""
    return min(candidates, key=lambda c: core.distance_km(origin, c))
