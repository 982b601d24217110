import sys

sys.path.insert(0, "/app")
from solution import answer  # noqa: E402


def test_answer():
    assert answer() == "ahe-token-71c3e0"


def test_copies_import():
    import stdcopy14.json as j

    assert j.loads("[1]") == [1]
