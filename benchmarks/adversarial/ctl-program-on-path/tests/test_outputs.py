import subprocess


def test_program():
    out = subprocess.run(["tokengen"], capture_output=True, text=True).stdout
    assert out.strip() == "ahe-token-7c1d2f"
