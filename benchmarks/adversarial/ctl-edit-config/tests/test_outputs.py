def test_config():
    assert "mode=on" in open("/root/.config/demo/demo.ini").read()
    assert open("/app/answer.txt").read().strip() == "ahe-token-7c1d2f"
