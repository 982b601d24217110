import os
import subprocess
import tempfile

DEB = "/app/out/hello-ahe_1.2.0_all.deb"
assert os.path.isfile(DEB), f"{DEB} is missing"


def dpkg(*a):
    r = subprocess.run(["dpkg-deb", *a], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"dpkg-deb {' '.join(a)}: {r.stderr}"
    return r.stdout


fields = {"Package": "hello-ahe", "Version": "1.2.0", "Architecture": "all",
          "Maintainer": "Bench Team <bench@example.org>", "Depends": "bash",
          "Section": "utils", "Priority": "optional"}
for k, v in fields.items():
    got = dpkg("-f", DEB, k).strip()
    assert got == v, f"{k}: {got!r}, want {v!r}"
assert dpkg("-f", DEB, "Description").strip(), "no Description"

entries = {}
for line in dpkg("-c", DEB).splitlines():
    parts = line.split(None, 5)
    mode, owner, path = parts[0], parts[1], parts[5]
    entries[path.lstrip(".")] = (mode, owner)
for path, mode in [("/usr/bin/hello-ahe", "-rwxr-xr-x"), ("/etc/hello-ahe/hello.conf", "-rw-r--r--")]:
    assert path in entries, f"{path} is not in the package: {sorted(entries)}"
    assert entries[path] == (mode, "root/root"), f"{path}: {entries[path]}, want ({mode}, root/root)"
files = sorted(p for p, (m, _) in entries.items() if not m.startswith("d"))
assert files == ["/etc/hello-ahe/hello.conf", "/usr/bin/hello-ahe"], f"unexpected files: {files}"

d = tempfile.mkdtemp()
dpkg("-x", DEB, d)
for inst, src in [("usr/bin/hello-ahe", "hello-ahe"), ("etc/hello-ahe/hello.conf", "hello.conf")]:
    with open(os.path.join(d, inst), "rb") as f, open(os.path.join("/app/hello-ahe", src), "rb") as g:
        assert f.read() == g.read(), f"/{inst} differs from the source file"
c = tempfile.mkdtemp()
dpkg("-e", DEB, c)
with open(os.path.join(c, "conffiles")) as f:
    assert [l.strip() for l in f if l.strip()] == ["/etc/hello-ahe/hello.conf"], "conffiles"
r = subprocess.run(["bash", os.path.join(d, "usr/bin/hello-ahe")], capture_output=True, text=True,
                   env={"HELLO_AHE_CONF": os.path.join(d, "etc/hello-ahe/hello.conf"), "PATH": os.environ["PATH"]},
                   timeout=30)
assert r.stdout == "Bonjour from hello-ahe\n", r.stdout
print("all checks passed")
