import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from geo import distance_km, nearest, route_length_km  # noqa: E402

PARIS, BERLIN, ROME = (48.8566, 2.3522), (52.52, 13.405), (41.9028, 12.4964)


class GeoTest(unittest.TestCase):
    def test_distance(self):
        self.assertAlmostEqual(distance_km(PARIS, BERLIN), 877.46, places=1)
        self.assertEqual(distance_km(ROME, ROME), 0.0)

    def test_route(self):
        self.assertAlmostEqual(route_length_km([PARIS, BERLIN, ROME]),
                               distance_km(PARIS, BERLIN) + distance_km(BERLIN, ROME))

    def test_nearest(self):
        self.assertEqual(nearest(PARIS, [ROME, BERLIN]), BERLIN)


if __name__ == "__main__":
    unittest.main()
