import subprocess

REPO = "/app/repo"
OLD_TIP = "34e2fdb952956f9c90b3a9caef76d136346bbcc7"
FIRST_BAD = "f47925df49a5acafd1dd9d1de29e1c825d983592"


def git(*a):
    return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, timeout=60)


with open("/app/first_bad.txt") as f:
    got = f.read().strip()
assert got == FIRST_BAD, f"first_bad.txt: {got!r}"

assert git("symbolic-ref", "--short", "HEAD").stdout.strip() == "main", "main is not checked out"
head = git("rev-parse", "HEAD").stdout.strip()
assert head != OLD_TIP, "no new commit on main"
assert git("merge-base", "--is-ancestor", OLD_TIP, "HEAD").returncode == 0, \
    "the old tip of main is not an ancestor of the new one (history was rewritten)"
count = git("rev-list", "--count", f"{OLD_TIP}..HEAD").stdout.strip()
assert count == "1", f"expected exactly one new commit, found {count}"
changed = git("diff", "--name-only", OLD_TIP, "HEAD").stdout.split()
assert changed == ["pricing.py"], f"the fix should only change pricing.py, changed: {changed}"
status = git("status", "--porcelain", "--untracked-files=no").stdout
assert status == "", f"working tree not clean:\n{status}"

r = subprocess.run(["bash", "/app/check.sh"], capture_output=True, text=True, timeout=60)
assert r.returncode == 0, f"/app/check.sh fails at the new tip: {r.stderr}"
# Later features are kept.
code = "\n".join([
    "import pricing",
    "assert pricing.bulk_price(1000, 10) == 9500",
    "assert pricing.clamp_percent(140) == 100",
    "assert pricing.format_cents(-1234) == '-12.34'",
    "assert pricing.tax(1005, 10) == 101",
    "assert pricing.total([(100, 2), (5, 3)]) == 215",
])
r = subprocess.run(["python3", "-B", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
assert r.returncode == 0, f"later changes were lost: {r.stderr}"
print("all checks passed")
