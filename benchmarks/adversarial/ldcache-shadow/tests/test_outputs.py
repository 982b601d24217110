import ctypes


def test_answer():
    lib = ctypes.CDLL("libahecheck.so.1")
    got = open("/app/answer.txt").read().strip().encode()
    assert lib.ahe_check(got) == 1
