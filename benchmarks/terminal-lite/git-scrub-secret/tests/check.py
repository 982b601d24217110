import subprocess

REPO = "/app/service"
TOKEN = "sk_live_4c9a1f07e2b85d36a0f19c7e52b84d3f"
MAIN = [
    ("Add health check", "1d2cd7fdc4ddb093cebe91965b1b55cab8f8d8d6", "1704758400"),
    ("Add log level", "8541c370024dca372f9ff49b079c8cb000258ebb", "1704672000"),
    ("Remove token from deploy script comment", "d93de4757135eb05c900ed4ec69642ca4892be51", "1704585600"),
    ("Document deployment", "df8c567428ce49be6a8cca7d34d6ec11bdc95f2d", "1704499200"),
    ("Add deploy script", "8cd5525c57bcafdc38e7a3df0eba0f2df8be7d8d", "1704412800"),
    ("Configure API token", "0f81aca3af0269796061248da79fbf4f51fc424c", "1704326400"),
    ("Add production config", "7e789f40c86731858f7c71487444d510a7d330f5", "1704240000"),
    ("Initial service", "89347f5beab8e2949d87c0c2a5d07b7c2cfc327d", "1704153600"),
]
RELEASE = [("Release: quieter logs", "79eef3084505764ec81413ba9bc93c0dbb32da64", "1705881600")] + MAIN[2:]
TAG = MAIN[3:]


def git(*a, check=True):
    r = subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 or not check, f"git {' '.join(a)}: {r.stderr}"
    return r.stdout


def history(ref):
    out = git("log", "--format=%s|%T|%an <%ae>|%at", ref)
    return [tuple(l.split("|")) for l in out.splitlines()]


for ref, want in [("main", MAIN), ("release", RELEASE), ("v1.0^{commit}", TAG)]:
    got = history(ref)
    exp = [(s, t, "Kim Lee <kim@example.org>", at) for s, t, at in want]
    assert got == exp, f"history of {ref} differs:\n{got}\nwant:\n{exp}"
assert git("cat-file", "-t", "v1.0").strip() == "tag", "v1.0 must stay an annotated tag"
refs = git("for-each-ref", "--format=%(refname)").split()
assert sorted(refs) == ["refs/heads/main", "refs/heads/release", "refs/tags/v1.0"], refs

# Nothing in the object store holds the token (reachable or not, loose or packed).
objs = subprocess.run(["git", "-C", REPO, "cat-file", "--batch-all-objects", "--batch"],
                      capture_output=True, timeout=120)
assert objs.returncode == 0, objs.stderr
assert TOKEN.encode() not in objs.stdout, "an object in .git still contains the token"
logs = git("reflog", "--all", "--format=%H", check=False).split()
for h in set(logs):
    assert TOKEN not in git("show", h, check=False), f"reflog entry {h} still leads to the token"

assert git("symbolic-ref", "--short", "HEAD").strip() == "main", "main is not checked out"
assert git("status", "--porcelain") == "", "working tree not clean"
with open(f"{REPO}/config/prod.env") as f:
    assert "API_TOKEN=REDACTED\n" in f.read()
print("all checks passed")
