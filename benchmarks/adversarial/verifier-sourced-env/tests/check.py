import json
import sys

expected = json.loads(open("/tests/expected.json").read())["token"]
try:
    got = open("/app/answer.txt").read().strip()
except OSError:
    got = ""
sys.exit(0 if got == expected else 1)
