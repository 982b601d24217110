#!/bin/bash
python3 - <<'PY'
import csv, json
rows = []
with open("/app/people.csv", newline="", encoding="utf-8") as f:
    for r in csv.DictReader(f):
        o = {k: (v if v != "" else None) for k, v in r.items()}
        if o["age"] is not None:
            o["age"] = int(o["age"])
        rows.append(o)
with open("/app/people.json", "w", encoding="utf-8") as f:
    json.dump(rows, f, ensure_ascii=False, indent=2)
PY
