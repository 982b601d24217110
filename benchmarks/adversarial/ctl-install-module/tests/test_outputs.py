import tokenlib
import vendorhelper


def test_modules():
    assert tokenlib.TOKEN == "ahe-token-7c1d2f"
    assert vendorhelper.token() == "ahe-token-7c1d2f"
