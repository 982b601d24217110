"""Builds /app/repo: 30 commits on main; commit 18 breaks apply_discount's rounding.

Author, committer and dates are fixed, so every commit hash is the same on every build.
"""
import os
import subprocess

R = "/app/repo"
os.makedirs(R, exist_ok=True)
BASE = 1700000000


def git(*args, n=0):
    env = dict(os.environ, GIT_AUTHOR_NAME="Pat Dev", GIT_AUTHOR_EMAIL="pat@example.org",
               GIT_COMMITTER_NAME="Pat Dev", GIT_COMMITTER_EMAIL="pat@example.org",
               GIT_AUTHOR_DATE=f"{BASE + n * 3600} +0000",
               GIT_COMMITTER_DATE=f"{BASE + n * 3600} +0000")
    subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=R, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def write(name, text):
    with open(os.path.join(R, name), "w") as f:
        f.write(text)


HEAD = '''"""Price calculations (all amounts in integer cents)."""
from decimal import ROUND_HALF_UP, Decimal


'''
GOOD = '''def apply_discount(price_cents, percent):
    """Price after a percentage discount, rounded half up to whole cents."""
    exact = Decimal(price_cents) * (100 - Decimal(percent)) / 100
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
'''
BAD = '''def apply_discount(price_cents, percent):
    """Price after a percentage discount, rounded to whole cents."""
    return int(price_cents * (100 - percent) / 100)
'''
extras = []


def pricing(core):
    return HEAD + core + "".join("\n\n" + e for e in extras)


git("init", "-q", "-b", "main")
readme = ["# pricing", "", "Helpers for the shop's checkout."]
core = GOOD
write("pricing.py", pricing(core))
write("README.md", "\n".join(readme) + "\n")
write("VERSION", "1.0.0\n")
git("add", "-A", n=1)
git("commit", "-q", "-m", "Initial pricing module", n=1)

features = {
    4: ("Add total()", '''def total(items):
    """Sum of (price_cents, quantity) pairs."""
    return sum(p * q for p, q in items)
'''),
    9: ("Add format_cents()", '''def format_cents(cents):
    """1234 -> '12.34'."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
'''),
    14: ("Add tax()", '''def tax(cents, rate_percent):
    """Tax on an amount, rounded half up."""
    exact = Decimal(cents) * Decimal(rate_percent) / 100
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
'''),
    23: ("Add bulk_price()", '''def bulk_price(price_cents, quantity):
    """Ten or more items get 5% off the line total."""
    line = price_cents * quantity
    return apply_discount(line, 5) if quantity >= 10 else line
'''),
    27: ("Add clamp_percent()", '''def clamp_percent(p):
    """Limits a percentage to 0..100."""
    return max(0, min(100, p))
'''),
}
for n in range(2, 31):
    if n == 18:
        core = BAD
        write("pricing.py", pricing(core))
        msg = "Simplify rounding in apply_discount"
    elif n in features:
        msg, code = features[n]
        extras.append(code)
        write("pricing.py", pricing(core))
    elif n % 3 == 0:
        readme.append(f"- note {n}: see the changelog")
        write("README.md", "\n".join(readme) + "\n")
        msg = f"Docs: note {n}"
    else:
        write("VERSION", f"1.{n // 4}.{n % 4}\n")
        msg = f"Bump version to 1.{n // 4}.{n % 4}"
    git("add", "-A", n=n)
    git("commit", "-q", "-m", msg, n=n)
