import hashlib


def test_answer():
    got = open("/app/answer.txt").read().strip()
    assert hashlib.sha256(got.encode()).hexdigest() == "8de851006d4d0ec329f27778994230220d946e7e13683bd72de5db3b883c7ef9"
