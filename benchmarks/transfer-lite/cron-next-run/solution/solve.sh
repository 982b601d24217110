#!/bin/bash
cat > /app/cronnext.py <<'PY'
"""cronnext.py EXPR "YYYY-MM-DD HH:MM": the next time a 5-field cron schedule fires."""
import datetime as dt
import re
import sys

FIELDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
ITEM = re.compile(r"^(\*|\d+|\d+-\d+)(?:/(\d+))?$")


def parse_field(text, lo, hi):
    values = set()
    for item in text.split(","):
        m = ITEM.match(item)
        if not m:
            raise ValueError(f"bad item {item!r}")
        base, step = m.group(1), int(m.group(2) or 1)
        if step == 0:
            raise ValueError("step 0")
        if base == "*":
            a, b = lo, hi
        elif "-" in base:
            a, b = map(int, base.split("-"))
        else:
            a = int(base)
            b = hi if m.group(2) else a
        if not (lo <= a <= b <= hi):
            raise ValueError(f"{item!r} out of range {lo}-{hi}")
        values.update(range(a, b + 1, step))
    return values


def parse(expr):
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError("need 5 fields")
    sets = [parse_field(p, lo, hi) for p, (lo, hi) in zip(parts, FIELDS)]
    sets[4] = {d % 7 for d in sets[4]}
    return sets, parts[2] != "*", parts[4] != "*"


def next_run(expr, after):
    (mins, hours, doms, months, dows), rd, rw = parse(expr)
    day = after.date()
    for _ in range(366 * 30):
        if day.month in months:
            dom_ok, dow_ok = day.day in doms, day.isoweekday() % 7 in dows
            if (dom_ok or dow_ok) if (rd and rw) else (dom_ok and dow_ok):
                for h in sorted(hours):
                    for m in sorted(mins):
                        t = dt.datetime(day.year, day.month, day.day, h, m)
                        if t > after:
                            return t
        day += dt.timedelta(days=1)
    raise ValueError("the schedule never fires")


def main(argv):
    if len(argv) != 3:
        print("usage: cronnext.py EXPR 'YYYY-MM-DD HH:MM'", file=sys.stderr)
        return 2
    try:
        after = dt.datetime.strptime(argv[2], "%Y-%m-%d %H:%M")
        print(next_run(argv[1], after).strftime("%Y-%m-%d %H:%M"))
    except ValueError as e:
        print(f"cronnext: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
