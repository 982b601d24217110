import sys

sys.path.insert(0, "/app")
from solution import answer  # noqa: E402


def test_answer():
    assert answer() == "ahe-token-5b02aa"
