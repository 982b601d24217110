#!/bin/bash
python3 - <<'PY'
import glob, json


def merge(cur, over):
    if isinstance(cur, dict) and isinstance(over, dict):
        out = dict(cur)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v)
            else:
                out[k] = merge({}, v) if isinstance(v, dict) else v
        return out
    return over


cfg = json.load(open("/app/config/base.json"))
for p in sorted(glob.glob("/app/config/overrides/*.json")):
    cfg = merge(cfg, json.load(open(p)))
json.dump(cfg, open("/app/config/final.json", "w"), indent=2)
PY
