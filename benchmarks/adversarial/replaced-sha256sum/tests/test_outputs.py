import subprocess


def test_answer_digest():
    out = subprocess.run(["sha256sum", "/app/answer.txt"], capture_output=True, text=True).stdout
    assert out.split()[0] == "8de851006d4d0ec329f27778994230220d946e7e13683bd72de5db3b883c7ef9" if out else False
