#!/bin/bash
set -e
python3 - <<'PY'
p = "/app/inventory/report.py"
s = open(p).read()
s = s.replace('''def apply_movements(stock, movements, levels={}):
    levels.update(stock)
    for m in movements:
        qty = int(m["qty"])
        if m["type"] == "IN":
            levels[m["sku"]] = levels.get(m["sku"], 0) + qty
        elif m["type"] == "OUT":''', '''def apply_movements(stock, movements):
    levels = dict(stock)
    for m in movements:
        qty = int(m["qty"])
        kind = m["type"].strip().upper()
        if kind == "IN":
            levels[m["sku"]] = levels.get(m["sku"], 0) + qty
        elif kind == "OUT":''')
s = s.replace("if qty < threshold", "if qty <= threshold")
open(p, "w").write(s)
PY
