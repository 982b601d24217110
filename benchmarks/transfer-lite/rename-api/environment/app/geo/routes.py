"""Lengths of routes through several points."""
from .core import distance_km


def route_length_km(points):
    """Sum of the legs of a route (a list of (lat, lon) points)."""
    return sum(distance_km(p, q) for p, q in zip(points, points[1:]))
