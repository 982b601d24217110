#!/bin/bash
# Passes (exit 0) when apply_discount in the checked-out /app/repo rounds correctly.
cd /app/repo || exit 2
export PYTHONDONTWRITEBYTECODE=1
python3 - <<'PY'
from pricing import apply_discount
assert apply_discount(999, 15) == 849, apply_discount(999, 15)
assert apply_discount(1999, 25) == 1499, apply_discount(1999, 25)
assert apply_discount(250, 10) == 225, apply_discount(250, 10)
assert apply_discount(1005, 50) == 503, apply_discount(1005, 50)
assert apply_discount(1, 50) == 1, apply_discount(1, 50)
PY
