#!/bin/bash
mkdir -p /app/clean
python3 - <<'PY'
import csv, datetime as dt, re

MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"], 1)}


def valid_email(e):
    if e.count("@") != 1 or re.search(r"\s", e):
        return False
    local, domain = e.split("@")
    return bool(local) and "." in domain[1:-1]


def phone(p):
    d = re.sub(r"\D", "", p)
    if len(d) == 10:
        return "+1" + d
    if len(d) == 11 and d.startswith("1"):
        return "+" + d
    return ""


def date(s):
    s = s.strip()
    pats = [(r"(\d{4})-(\d{1,2})-(\d{1,2})", "ymd"), (r"(\d{4})/(\d{1,2})/(\d{1,2})", "ymd"),
            (r"(\d{1,2})\.(\d{1,2})\.(\d{4})", "dmy")]
    try:
        for pat, order in pats:
            m = re.fullmatch(pat, s)
            if m:
                a, b, c = map(int, m.groups())
                y, mo, d = (a, b, c) if order == "ymd" else (c, b, a)
                return dt.date(y, mo, d).isoformat()
        m = re.fullmatch(r"([A-Za-z]+) (\d{1,2}), (\d{4})", s)
        if m:
            name = m.group(1).lower()
            mo = MONTHS.get(name) or next((i for n, i in MONTHS.items() if len(name) == 3 and n.startswith(name)), None)
            if mo:
                return dt.date(int(m.group(3)), mo, int(m.group(2))).isoformat()
    except ValueError:
        pass
    return ""


seen = set()
with open("/app/raw/contacts.csv", newline="") as f, open("/app/clean/contacts.csv", "w", newline="") as g:
    w = csv.writer(g)
    w.writerow(["name", "email", "phone", "signup_date"])
    for r in csv.DictReader(f):
        email = r["email"].strip().lower()
        if not valid_email(email) or email in seen:
            continue
        seen.add(email)
        w.writerow([" ".join(r["name"].split()), email, phone(r["phone"]), date(r["signup_date"])])
PY
