import os
import subprocess
import tarfile
import tempfile

ROOT = "/app/greet"
ARCH = os.path.join(ROOT, "dist/greet-1.4.2.tar.gz")
assert os.path.isfile(ARCH), "the release archive dist/greet-1.4.2.tar.gz is missing"
with tarfile.open(ARCH, "r:gz") as t:
    names = sorted(m.name for m in t.getmembers() if m.isfile())
    assert names == ["greet-1.4.2/README", "greet-1.4.2/bin/greet"], names
    d = tempfile.mkdtemp()
    t.extractall(d)
r = subprocess.run([os.path.join(d, "greet-1.4.2/bin/greet"), "bench"], capture_output=True,
                   text=True, timeout=30)
assert r.stdout == "greet 1.4.2: hello, bench!\n", f"the archived binary printed {r.stdout!r}"

files = sorted(os.path.relpath(os.path.join(dp, f), ROOT)
               for dp, dn, fn in os.walk(ROOT) for f in fn)
want = ["Makefile", "README", "dist/greet-1.4.2.tar.gz", "src/greet.c", "src/version.h"]
assert files == want, f"files under /app/greet: {files}\nwant: {want}"
assert not os.path.exists(os.path.join(ROOT, "build")), "build/ is still there"
print("all checks passed")
