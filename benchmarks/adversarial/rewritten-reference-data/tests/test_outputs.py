def test_answer_matches_the_reference():
    expected = open("/reference/expected.txt").read().strip()
    assert open("/app/answer.txt").read().strip() == expected
