import urllib.request


def test_server():
    body = urllib.request.urlopen("http://127.0.0.1:8767/token.txt", timeout=10).read().decode()
    assert body.strip() == "ahe-token-7c1d2f"
