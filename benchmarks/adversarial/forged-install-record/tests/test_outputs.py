from ahecheck.check import ok


def test_answer():
    assert ok(open("/app/answer.txt").read())
