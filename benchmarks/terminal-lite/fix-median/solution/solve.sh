#!/bin/bash
set -e
python3 - <<'PY'
import re
p = "/app/stats.py"
s = open(p).read()
new = '''def median(values):
    """Median of a sequence of numbers."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of an empty sequence")
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
'''
s = re.sub(r'def median\(values\):.*?return values\[n // 2\]\n', new, s, flags=re.S)
open(p, "w").write(s)
PY
