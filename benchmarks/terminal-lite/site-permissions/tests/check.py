import os
import stat

ROOT = "/app/site"
want = {
    ".": 0o755, "public": 0o755, "public/css": 0o755, "public/img": 0o755, "bin": 0o755,
    "private": 0o700, "private/keys": 0o700, "logs": 0o755,
    "public/index.html": 0o644, "public/css/main.css": 0o644, "public/img/logo.png": 0o644,
    "bin/deploy.sh": 0o755, "bin/rotate-logs": 0o755, "private/.htpasswd": 0o600,
    "private/keys/server.key": 0o600, "logs/app.log": 0o644, "site.conf": 0o644,
}
got = {".": stat.S_IMODE(os.lstat(ROOT).st_mode)}
for dp, dn, fn in os.walk(ROOT):
    for n in dn + fn:
        p = os.path.join(dp, n)
        got[os.path.relpath(p, ROOT)] = stat.S_IMODE(os.lstat(p).st_mode)
assert sorted(got) == sorted(want), f"entries changed: {sorted(got)}"
bad = {k: (oct(got[k]), oct(v)) for k, v in want.items() if got[k] != v}
assert not bad, f"wrong modes (got, want): {bad}"
with open(os.path.join(ROOT, "bin/deploy.sh")) as f:
    assert f.read() == "#!/bin/bash\necho deploying\n"
print("all checks passed")
