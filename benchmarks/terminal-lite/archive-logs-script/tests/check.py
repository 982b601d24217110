import gzip
import os
import subprocess
import tempfile

SCRIPT = "/app/bin/archive-logs.sh"


def run(d):
    return subprocess.run(["bash", SCRIPT, d], capture_output=True, text=True, timeout=60)


with tempfile.TemporaryDirectory() as root:
    d = os.path.join(root, "my logs")
    os.makedirs(os.path.join(d, "sub"))
    files = {"a.log": "alpha\n", "b c.log": "bravo charlie\n", "d.log": "", "e.txt": "x\n",
             "log": "no suffix\n", "sub/f.log": "nested\n"}
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    r = run(d)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert r.stdout == "archived 3 files\n", repr(r.stdout)
    for name in ["a.log", "b c.log", "d.log"]:
        assert not os.path.exists(os.path.join(d, name)), f"{name} was not removed"
        with gzip.open(os.path.join(d, "archive", name + ".gz"), "rt") as f:
            assert f.read() == files[name], f"archive of {name} has the wrong content"
    for name in ["e.txt", "log", "sub/f.log"]:
        with open(os.path.join(d, name)) as f:
            assert f.read() == files[name], f"{name} must be left alone"
    assert sorted(os.listdir(os.path.join(d, "archive"))) == ["a.log.gz", "b c.log.gz", "d.log.gz"]

    # Nothing to do (the archive directory now exists, but holds no .log files).
    r = run(d)
    assert r.returncode == 0, f"second run: exit {r.returncode}: {r.stderr}"
    assert r.stdout == "archived 0 files\n", repr(r.stdout)

    empty = os.path.join(root, "empty dir")
    os.makedirs(empty)
    r = run(empty)
    assert r.returncode == 0 and r.stdout == "archived 0 files\n", (r.returncode, r.stdout, r.stderr)

    one = os.path.join(root, "one")
    os.makedirs(one)
    open(os.path.join(one, "x.log"), "w").write("1\n")
    r = run(one)
    assert r.returncode == 0 and r.stdout == "archived 1 files\n", (r.returncode, r.stdout, r.stderr)
print("all checks passed")
