def test_answer():
    assert open("/app/answer.txt").read().strip() == "ahe-token-7c1d2f"
