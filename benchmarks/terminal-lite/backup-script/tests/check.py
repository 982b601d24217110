import os
import subprocess
import tarfile
import tempfile

S = "/app/backup.sh"
assert os.access(S, os.X_OK), "/app/backup.sh is missing or not executable"


def run(*args):
    return subprocess.run([S, *args], capture_output=True, text=True, timeout=60)


def members(path):
    with tarfile.open(path, "r:gz") as t:
        return sorted(m.name.rstrip("/") for m in t.getmembers() if m.isfile())


def content(path, name):
    with tarfile.open(path, "r:gz") as t:
        return t.extractfile(name).read().decode()


root = tempfile.mkdtemp()
src = os.path.join(root, "my project")
for rel, text in {"a.txt": "A1\n", ".hidden": "H\n", "sub/b.txt": "B\n", "sub/x.tmp": "T\n",
                  "sub/.cache/c": "C\n", ".cache/d": "D\n", "sub/deep/keep.tmpl": "K\n",
                  "sub/deep/.cache/e": "E\n"}.items():
    p = os.path.join(src, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)
dest = os.path.join(root, "backups dir", "daily")
r = run(src + "/", dest)
assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
arch = os.path.join(dest, "my project.tar.gz")
assert r.stdout.strip() == arch, f"printed {r.stdout!r}, want {arch!r}"
want = ["my project/.hidden", "my project/a.txt", "my project/sub/b.txt", "my project/sub/deep/keep.tmpl"]
assert members(arch) == want, f"archive holds {members(arch)}, want {want}"
assert content(arch, "my project/a.txt") == "A1\n"

# Second run keeps one previous archive.
with open(os.path.join(src, "a.txt"), "w") as f:
    f.write("A2\n")
r = run(src, dest)
assert r.returncode == 0, r.stderr
prev = os.path.join(dest, "my project.1.tar.gz")
assert os.path.isfile(prev), "previous archive not kept as NAME.1.tar.gz"
assert content(prev, "my project/a.txt") == "A1\n" and content(arch, "my project/a.txt") == "A2\n"
with open(os.path.join(src, "a.txt"), "w") as f:
    f.write("A3\n")
r = run(src, dest)
assert r.returncode == 0, r.stderr
assert content(prev, "my project/a.txt") == "A2\n" and content(arch, "my project/a.txt") == "A3\n"
assert sorted(os.listdir(dest)) == ["my project.1.tar.gz", "my project.tar.gz"], os.listdir(dest)

# The example directory.
r = run("/app/projects/web site", os.path.join(root, "out"))
assert r.returncode == 0, r.stderr
assert members(os.path.join(root, "out", "web site.tar.gz")) == \
    ["web site/index.html", "web site/src/style.css"]

# Errors: exit 2, nothing created.
for args in [(), (src,), (src, dest, "extra"), (os.path.join(root, "nope"), os.path.join(root, "e1")),
             (os.path.join(src, "a.txt"), os.path.join(root, "e2"))]:
    r = run(*args)
    assert r.returncode == 2, f"{args}: exit {r.returncode}, want 2"
    assert r.stderr.strip(), f"{args}: no error message on stderr"
assert not os.path.exists(os.path.join(root, "e1")) and not os.path.exists(os.path.join(root, "e2"))
print("all checks passed")
