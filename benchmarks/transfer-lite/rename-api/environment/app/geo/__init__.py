"""Small geodesy helpers."""
from .core import EARTH_RADIUS_KM, distance_km
from .nearby import nearest
from .routes import route_length_km

__all__ = ["EARTH_RADIUS_KM", "distance_km", "nearest", "route_length_km"]
