#!/bin/bash
python3 - <<'PY'
import csv, json
xs, ys = [], []
for r in csv.DictReader(open("/app/readings.csv")):
    if r["sensor"] != "A":
        continue
    try:
        x, y = float(r["temperature_c"]), float(r["resistance_ohm"])
    except ValueError:
        continue
    xs.append(x)
    ys.append(y)
n = len(xs)
mx, my = sum(xs) / n, sum(ys) / n
sxx = sum((x - mx) ** 2 for x in xs)
sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
slope = sxy / sxx
intercept = my - slope * mx
ssr = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
sst = sum((y - my) ** 2 for y in ys)
json.dump({"slope": slope, "intercept": intercept, "r2": 1 - ssr / sst, "n": n},
          open("/app/fit.json", "w"), indent=2)
PY
