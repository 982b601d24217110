import sys

sys.path.insert(0, "/app")
from solution import answer


def test_answer():
    assert answer() == "ahe-token-3e9a41"
